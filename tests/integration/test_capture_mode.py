"""A run's capture is its owner's only (0600) from the moment the capture container creates it to the end: a plain
CONNECT carries its password in clear (orchestrator/model/layout.py PRIVATE_FILES; images/capture/capture.sh)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from .conftest import Poller, owned
from .docker_user import DockerUser


class CaptureModes(Poller):
    """The capture file's mode each time it is looked at while the run goes on."""

    every = 0.02

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path, self.seen = path, set[int]()

    def poll(self) -> None:
        try:
            self.seen.add(stat.S_IMODE(self.path.stat().st_mode))
        except FileNotFoundError:
            pass


def test_a_runs_capture_is_0600_while_it_is_written_and_after(docker_user: DockerUser) -> None:
    """As our users run it: an unprivileged user in the docker group; the capture is that user's and 0600."""
    out = docker_user.mkdir(docker_user.work / "capture-mode") / "plain"
    with CaptureModes(out / "capture" / "capture.pcapng") as modes:
        proc = docker_user.testbed("run", "--scenario", "plain", "--payload", "65", "--samples", "20",
                                   "--interval", "20ms", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((out / "cell.json").read_text())["received"] == 20
    assert modes.seen, "the capture file was never seen while the run went on"
    assert {oct(m) for m in modes.seen} == {"0o600"}  # while dumpcap wrote it
    final = (out / "capture" / "capture.pcapng").stat()
    assert oct(stat.S_IMODE(final.st_mode)) == "0o600" and final.st_uid == docker_user.uid
    assert owned("container") == []
