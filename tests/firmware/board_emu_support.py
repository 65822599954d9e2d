"""board-emu, the emulated ESP32 on a pseudo-terminal, as a pytest fixture: start it with options,
get the pty's path, talk to it through orchestrator.publishers.board.link; stopped at teardown."""

from __future__ import annotations

import select
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fwtest_support import HostBuild, realtime


@dataclass
class Emulator:
    pty: str
    proc: subprocess.Popen[str]
    stderr_path: Path

    def stop(self) -> str:
        """Stops it (if still running) and returns what it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.stderr_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@pytest.fixture
def board_emu(host_build: HostBuild, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator:
    """``start(*args)`` runs board-emu with those options and returns an Emulator once its pty exists; for a test
    marked ``timing`` (its delay line and clock held against the truth log) under the real-time scheduler
    (fwtest_support.realtime)."""
    started: list[Emulator] = []
    wrap = realtime if request.node.get_closest_marker("timing") else list

    def start(*args: str) -> Emulator:
        err = tmp_path / f"board-emu-{len(started)}.stderr"
        with err.open("w") as err_file:
            proc = subprocess.Popen(wrap([str(host_build.board_emu), *args]), stdout=subprocess.PIPE, stderr=err_file,
                                    stdin=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("PTY /dev/"), f"board-emu printed {line!r}; stderr: {err.read_text()}"
        emu = Emulator(line.split()[1], proc, err)
        started.append(emu)
        return emu

    yield start
    for emu in started:
        emu.stop()


def wait_exit(emu: Emulator, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while emu.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emu.proc.returncode is not None, "board-emu did not exit"
    return emu.proc.returncode
