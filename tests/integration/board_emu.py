"""`testbed board emulate` as the docker-group user, for the board tests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .docker_user import DockerUser


def emulate(user: DockerUser, name: str, *args: str) -> tuple[subprocess.Popen[str], Path]:
    """`testbed board emulate` as the user, in the background; its serial port once it exists."""
    pty = user.work / f"{name}.pty"
    log = (user.work / f"{name}.log").open("w")
    proc = subprocess.Popen(user.argv([user.testbed_exe, "board", "emulate", "--pty-link", str(pty), *args]),
                            stdout=log, stderr=subprocess.STDOUT, env=user.env(), cwd=user.clone)
    log.close()
    deadline = time.monotonic() + 600  # the first call builds board-emu
    while not pty.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pty.exists(), (user.work / f"{name}.log").read_text()[-3000:]
    return proc, pty
