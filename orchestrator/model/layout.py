"""Where results live: every file name of a run folder and of a results bundle, defined once.

A bundle (results/<UTC>-<name>/) holds manifest.json, runs/<cell>/ (one run folder each) and the derived
summary.csv, comparisons.csv, report.md, report.html and plots/.

The run folder is mounted at /data in every container:
    config/   mosquitto.conf (+ openssl.cnf for TLS-1.2-only scenarios)
    pki/      throwaway CA, server (and client) certificates, passwords.txt  (secrets: 0600)
    capture/  capture.pcapng written by the sidecar
    logs/     subscriber.csv, subscriber_status.json, publisher.csv, publisher_summary.json, <service>.log of
              every container and containers.json (their state), saved when the project goes down;
              fleet/ for a fleet (--devices N > 1): one send log per device, connections.csv, summary.json
    keylogs/  NSS key logs of our clients, so the capture can be decrypted

A run across lab hosts (--inventory, docs/multi-host.md) adds config/mosquitto.native.conf (the broker's
configuration with the paths of the broker host, for a broker run without Docker), a copy of the inventory
(inventory.<its suffix>, also at the bundle's root), logs/host_clock.json (the publisher host's clock against
the broker host's) and logs/hosts/<host>/ (each host's process logs and exit codes, the publisher's logs on its
own clock, the clock exchanges).

Files that can hold a secret (a private key, a password, TLS key-log material) are DECLARED here, once
(SECRET_FILES): the archive leaves them out (results/archive.py), the manifest lists them
(``secrets_in_bundle``), they are written 0600 (SECRET_MODE, results/atomic.py), and the text of a
transcript or of error evidence is redacted where it is written (orchestrator/redact.py). Files that are
evidence but can hold a secret value (PRIVATE_FILES: a capture, where a plain CONNECT carries its password in
clear) are written 0600 as well (the capture image's umask, lab/capture_split.py, protect_secrets) and archived
with the value overwritten (results/scrub.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DATA = "/data"

# versions of the results formats: raised when a format changes (results/schema.py migrates older data)
SCHEMA_VERSIONS = {"manifest": 2, "metrics": 2, "cell": 2}

# run folder: what the analysis writes, and the run's own records
CELL = "cell.json"
METRICS = "metrics.json"
PER_MESSAGE = "per_message.csv"
PACKETS = "packets.csv"
EXCHANGES = "exchanges.csv"  # each message's exchange (analysis/exchange.py; runanalysis/exchanges.py wanted)
IMPAIRMENT = "impairment.json"
RESOURCES = "resources.json"
SCENARIO = "scenario.json"
CONTAINERS = "containers.json"
ENERGY = "energy.json"  # a power trace imported against the run, and the model beside it (runanalysis/energyimport.py)
ANALYSIS_OUTPUTS = (PER_MESSAGE, PACKETS, METRICS)
INVENTORY_COPY = "inventory"  # + the inventory's own suffix (.yml, .yaml, .ini or none)

# a board's serial port (--publisher esp32): every line it printed during a run, and, when the run failed,
# the last lines both ways (the host's RUN included, redacted where written)
SERIAL_LOG = "serial.log"
SERIAL_TRANSCRIPT = "serial_transcript.log"

# bundle
MANIFEST = "manifest.json"
RUNS = "runs"
BLOCKS = "blocks"
SPLIT = "split.json"  # a kept-up lab's folder (blocks/lab-NNN/): its capture's split checked (lab/keptlab.py)
SUMMARY = "summary.csv"
COMPARISONS = "comparisons.csv"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS = "plots"
SWEEP_LOCK = ".sweep.lock"  # held (flock) by the sweep writing the bundle: results/bundle_lock.py


SECRET_MODE = 0o600  # a declared secret file: its owner only
PUBLIC_MODE = 0o644


@dataclass(frozen=True)
class SecretFile:
    """A kind of file that can hold a secret: ``glob`` as the manifest names it, ``holds`` what it may hold,
    ``pattern`` matched against a path relative to a run folder or a bundle (or any path ending so)."""

    glob: str
    holds: str
    pattern: re.Pattern[str]


SECRET_FILES = (
    SecretFile("*.key", "private keys (pki/: the CA's, the broker's, the clients')",
               re.compile(r"(^|/)[^/]+\.key$")),
    SecretFile("*password*", "broker passwords (pki/passwords.txt, any password file)",
               re.compile(r"(^|/)[^/]*passw(or)?d[^/]*$", re.IGNORECASE)),
    SecretFile("keylogs/*", "TLS key logs of our clients and the board",
               re.compile(r"(^|/)keylogs/.+$")),
    SecretFile("*.keys, *.keylog", "TLS key logs in any folder (e.g. a lab host's)",
               re.compile(r"(^|/)[^/]+\.(keys|keylog|keylogs)$")),
    SecretFile(f"logs/{SERIAL_LOG}", "a board's serial output: its KEYLOG lines (the TLS secrets)",
               re.compile(rf"(^|/)logs/{re.escape(SERIAL_LOG)}$")),
    SecretFile(f"logs/{SERIAL_TRANSCRIPT}", "a board's serial transcript: the RUN it was sent (credentials, the "
               "client's private key) and its KEYLOG lines; redacted where written, kept out all the same",
               re.compile(rf"(^|/)logs/{re.escape(SERIAL_TRANSCRIPT)}$")),
    SecretFile(f"{INVENTORY_COPY}*", "the lab's inventory (may hold Ansible passwords)",
               re.compile(rf"(^|/){INVENTORY_COPY}(\.[A-Za-z]+)?$")),
)


# evidence that can hold a secret VALUE: kept in the archive (the value overwritten, results/scrub.py), but
# written 0600 like a secret file
PRIVATE_FILES = (
    SecretFile("capture/*.pcapng", "captures (a cell's, a kept lab's gaps): a plain CONNECT carries its password "
               "in clear", re.compile(r"(^|/)capture/[^/]+\.pcapng$")),
)


def secret_kind(path: str | PurePosixPath | Path) -> SecretFile | None:
    """The declared kind of secret file ``path`` is (relative to a run folder or a bundle), or None."""
    rel = path.as_posix() if isinstance(path, PurePosixPath | Path) else path
    return next((s for s in SECRET_FILES if s.pattern.search(rel)), None)


def is_secret(path: str | PurePosixPath | Path) -> bool:
    return secret_kind(path) is not None


def is_private(path: str | PurePosixPath | Path) -> bool:
    """Whether ``path`` is written 0600: a declared secret file, or evidence that can hold a secret value."""
    rel = path.as_posix() if isinstance(path, PurePosixPath | Path) else path
    return is_secret(rel) or any(s.pattern.search(rel) for s in PRIVATE_FILES)


def file_mode(path: str | PurePosixPath | Path) -> int:
    """The mode a results file is written with: 0600 for a declared secret or a private file, else 0644."""
    return SECRET_MODE if is_private(path) else PUBLIC_MODE


def secrets_in_bundle() -> list[str]:
    """The declared secret files as the manifest lists them."""
    return [s.glob for s in SECRET_FILES]


@dataclass(frozen=True)
class Layout:
    """One run folder."""

    root: Path

    @property
    def cell(self) -> Path:
        return self.root / CELL

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def per_message(self) -> Path:
        return self.root / PER_MESSAGE

    @property
    def packets(self) -> Path:
        return self.root / PACKETS

    @property
    def exchanges(self) -> Path:
        return self.root / EXCHANGES

    @property
    def impairment(self) -> Path:
        return self.root / IMPAIRMENT

    @property
    def resources(self) -> Path:
        return self.root / RESOURCES

    @property
    def scenario(self) -> Path:
        """The scenario as run, so `testbed report` can re-analyse without the original YAML."""
        return self.config / SCENARIO

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
    def publisher_connections(self) -> Path:
        """The publisher's own record of each connection (not persistent): its claim of resumption."""
        return self.logs / "publisher_connections.csv"

    @property
    def energy(self) -> Path:
        """What the run cost the device's battery: an imported power trace and the model (docs/energy.md)."""
        return self.root / ENERGY

    @property
    def connections(self) -> Path:
        """The publisher's connections as the capture shows them (analysis/lifecycle.py)."""
        return self.root / "connections.csv"

    @property
    def fleet_dir(self) -> Path:
        """A fleet's own records (--devices N > 1): <device>.csv send logs (seq,t_send_us,bytes,t_intended_us),
        connections.csv (device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error), summary.json."""
        return self.logs / "fleet"

    @property
    def devices(self) -> Path:
        """A fleet's per-device table: delivered / lost per device, each lost message tied to the capture."""
        return self.root / "devices.csv"

    @property
    def publisher_summary(self) -> Path:
        return self.logs / "publisher_summary.json"

    @property
    def publisher_go(self) -> Path:
        """Created by the orchestrator when the publisher may start (see compose/testbed.yml)."""
        return self.config / "publisher.go"

    def container_log(self, service: str) -> Path:
        """logs/<service>.log: the service container's output, saved when the project goes down."""
        return self.logs / f"{service}.log"

    @property
    def containers(self) -> Path:
        """logs/containers.json: every container's state (exit code, OOMKilled, health) and the first failure."""
        return self.logs / CONTAINERS

    @property
    def native_broker_conf(self) -> Path:
        """Mosquitto's configuration for a broker host without Docker (paths of that host's lab folder)."""
        return self.config / "mosquitto.native.conf"

    @property
    def serial_log(self) -> Path:
        """A board's serial output during its runs (a declared secret: its KEYLOG lines)."""
        return self.logs / SERIAL_LOG

    @property
    def serial_transcript(self) -> Path:
        """A failed board run's last serial lines both ways, redacted (and declared secret all the same)."""
        return self.logs / SERIAL_TRANSCRIPT

    @property
    def host_clock(self) -> Path:
        """The publisher host's clock against the broker host's (a lab run across hosts)."""
        return self.logs / "host_clock.json"

    @property
    def fleet_hosts(self) -> Path:
        """device,host: which lab host ran each device of a fleet (lab/merge.py)."""
        return self.logs / "fleet_hosts.csv"

    @property
    def fleet_start(self) -> Path:
        """A fleet over several lab hosts: its start on the broker host's clock and on each host's (lab/start.py)."""
        return self.logs / "fleet_start.json"

    def host_logs(self, host: str) -> Path:
        """logs/hosts/<host>/: what a lab host ran (process logs, exit codes) and its own-clock records."""
        return self.logs / "hosts" / host

    def inventory_copy(self, source: Path) -> Path:
        return inventory_copy(self.root, source)

    def in_container(self, path: Path) -> str:
        return f"{DATA}/{path.relative_to(self.root).as_posix()}"


def inventory_copy(folder: Path, source: Path) -> Path:
    """Where the copy of the lab inventory ``source`` goes in a run folder or a bundle."""
    return folder / (INVENTORY_COPY + source.suffix)


@dataclass(frozen=True)
class BundleLayout:
    """One results bundle."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def runs(self) -> Path:
        return self.root / RUNS

    @property
    def blocks(self) -> Path:
        """blocks/lab-NNN/: a sweep block's kept-up lab (orchestrator/lab/keptlab.py): its configuration, its
        containers' logs, split.json and the capture's packets that were no cell's (capture/gaps.pcapng)."""
        return self.root / BLOCKS

    def run(self, cell_id: str) -> Layout:
        return Layout(self.runs / cell_id)

    def run_folders(self) -> list[Path]:
        """Every run folder, sorted by name (none when runs/ is missing)."""
        return sorted(p for p in self.runs.glob("*") if p.is_dir())

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY

    @property
    def comparisons(self) -> Path:
        return self.root / COMPARISONS

    @property
    def report_md(self) -> Path:
        return self.root / REPORT_MD

    @property
    def report_html(self) -> Path:
        return self.root / REPORT_HTML

    @property
    def plots(self) -> Path:
        return self.root / PLOTS

    @property
    def sweep_lock(self) -> Path:
        """Locked while a sweep writes the bundle (a new one, or its --resume): results/bundle_lock.py."""
        return self.root / SWEEP_LOCK
