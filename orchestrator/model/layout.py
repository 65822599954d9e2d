"""The run folder's layout: every file name of a run folder, defined once.

The run folder is mounted at /data in every container:
    config/   mosquitto.conf (+ openssl.cnf for TLS-1.2-only scenarios)
    pki/      throwaway CA, server (and client) certificates, passwords.txt  (secrets: 0600)
    capture/  capture.pcapng written by the sidecar
    logs/     subscriber.csv, subscriber_status.json, publisher.csv, publisher_summary.json, broker.log
    keylogs/  NSS key logs of our clients, so the capture can be decrypted
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DATA = "/data"


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def capture(self) -> Path:
        return self.root / "capture" / "capture.pcapng"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def keylogs(self) -> Path:
        return self.root / "keylogs"

    @property
    def subscriber_log(self) -> Path:
        return self.logs / "subscriber.csv"

    @property
    def subscriber_status(self) -> Path:
        return self.logs / "subscriber_status.json"

    @property
    def publisher_log(self) -> Path:
        return self.logs / "publisher.csv"

    @property
    def publisher_summary(self) -> Path:
        return self.logs / "publisher_summary.json"

    @property
    def publisher_go(self) -> Path:
        """Created by the orchestrator when the publisher may start (see compose/testbed.yml)."""
        return self.config / "publisher.go"

    def in_container(self, path: Path) -> str:
        return f"{DATA}/{path.relative_to(self.root).as_posix()}"
