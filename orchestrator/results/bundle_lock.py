"""A bundle is written by one sweep at a time: the sweep holds a lock on BUNDLE/.sweep.lock (fcntl.flock) from the
moment it makes the bundle, or resumes it, until it ends; `sweep --resume` of a bundle whose sweep still runs is
refused, naming the bundle and the sweep that holds it.

The kernel releases the lock when its holder's process ends, however it ends (Ctrl-C, SIGTERM, SIGKILL), so a lock
file a dead process left blocks nothing. The file says who holds it (pid, host, since when), for the refusal; it
starts with a dot, so the archive leaves it out.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from pathlib import Path

from orchestrator.errors import TestbedError
from orchestrator.model.layout import BundleLayout

_HELD: dict[Path, int] = {}  # bundle -> the open lock file this process holds


def hold(bundle: Path) -> None:
    """Lock ``bundle`` for this process's sweep (nothing when this process holds it already); TestbedError when
    another process's sweep holds it."""
    key = bundle.resolve()
    if key in _HELD:
        return
    path = BundleLayout(bundle).sweep_lock
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise TestbedError(f"cannot lock {bundle} for the sweep: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder(fd)
        os.close(fd)
        raise TestbedError(f"{bundle} is being written by a sweep that is still running ({holder})",
                           hint=f"let it finish, or stop it (Ctrl-C); then: testbed sweep --resume {bundle}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                              "since_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}).encode(), 0)
    _HELD[key] = fd


def release_bundle(bundle: Path) -> None:
    """Let ``bundle`` go (the sweep of this process has ended); nothing when it is not held here."""
    fd = _HELD.pop(bundle.resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the file releases the lock


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says."""
    try:
        who = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        who = {}
    if not isinstance(who, dict) or "pid" not in who:
        return "its lock is held"
    return f"pid {who['pid']} on {who.get('host', '?')}, since {who.get('since_utc', '?')}"
