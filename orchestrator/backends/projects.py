"""Which compose project an invocation owns, and the lock that says the invocation is alive.

Two users (or one user twice) may run at once, so nothing is shared by name: every invocation that starts
containers (run, sweep, a board's cell) has its own compose project ``testbed-<user>-<8 hex>``, hence its
own containers, networks and impairment helpers (all named after the project); `testbed up` has the user's
session project ``testbed-<user>-session``, which `status` and `down` find.

While an invocation's project exists it holds an exclusive flock on ``<lock dir>/<project>.lock`` (its pid,
command line and start time inside, for messages). The kernel drops the lock when the process ends, however
it ends: a lock file that can be locked is a crashed invocation's, whose leftovers `testbed down` removes;
one that cannot is a live invocation, which nothing of ours touches. The lock dir is the user's own
($XDG_CACHE_HOME/testbed/projects, else ~/.cache/testbed/projects).
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import re
import secrets
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import TestbedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; every other project counts as live
    fcntl = None  # type: ignore[assignment]

PREFIX = "testbed"
SESSION = "session"
OWNER_LABEL = "io.testbed.owner"  # on every container and network we make: the user name (owner_slug)
PROJECT_LABEL = "io.testbed.project"  # on the helper containers, which are not compose's
_held: dict[str, int] = {}  # project -> the descriptor holding its lock (this process's projects)


def owner_slug() -> str:
    """The user running testbed, as it may appear in a compose project name ([a-z0-9_-], at most 16)."""
    try:
        import pwd

        name = pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # no such uid in the passwd database, or Windows
        import getpass

        name = getpass.getuser()
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:16].strip("-_")
    return slug or f"uid{os.getuid() if hasattr(os, 'getuid') else 0}"


def new_name() -> str:
    """A fresh invocation project: testbed-<user>-<8 hex>."""
    return f"{PREFIX}-{owner_slug()}-{secrets.token_hex(4)}"


def session_name() -> str:
    return f"{PREFIX}-{owner_slug()}-{SESSION}"


def lock_dir() -> Path:
    """The user's own folder of lock files; a home that cannot be written falls back to the temp folder."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(base) / "testbed" / "projects"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        folder = Path(tempfile.gettempdir()) / f"testbed-{uid}" / "projects"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def lock_path(project: str) -> Path:
    return lock_dir() / f"{project}.lock"


@dataclass(frozen=True)
class Holder:
    """The live invocation that holds a project."""

    project: str
    pid: int
    command: str
    started: str

    def __str__(self) -> str:
        return f"project {self.project} (pid {self.pid}, `{self.command}`, since {self.started})"


def _holder(project: str, text: str) -> Holder:
    try:
        data = json.loads(text)
    except ValueError:
        data = {}
    return Holder(project, int(data.get("pid") or 0), str(data.get("command") or "?"), str(data.get("started") or "?"))


def claim(project: str) -> None:
    """Hold ``project``'s lock for the rest of this process (or until release_project()); TestbedError naming the
    invocation that holds it already."""
    if project in _held or fcntl is None:
        return
    path = lock_path(project)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(project, path.read_text(errors="replace"))
        os.close(fd)
        raise TestbedError(f"{holder} is running and owns these containers",
                           hint="wait for it to end, or stop it (Ctrl-C in its terminal); `testbed status` lists "
                                "your testbed containers") from None
    record = {"pid": os.getpid(), "command": " ".join(["testbed", *sys.argv[1:]])[:200],
              "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(record).encode())
    _held[project] = fd
    atexit.register(release_project, project)  # held to the end; the kernel frees it however the process ends


def release_project(project: str) -> None:
    """Give up ``project``'s lock and delete its file (at exit; what it left is found by its owner label)."""
    fd = _held.pop(project, None)
    if fd is not None:
        lock_path(project).unlink(missing_ok=True)
        os.close(fd)


def holder(project: str) -> Holder | None:
    """The live invocation holding ``project`` (this one included), or None: crashed, ended or never locked."""
    path = lock_path(project)
    if project in _held:
        return _holder(project, path.read_text(errors="replace"))
    if fcntl is None:
        return Holder(project, 0, "?", "?") if path.exists() else None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(project, path.read_text(errors="replace"))
    finally:
        os.close(fd)
    return None


def locked_projects() -> list[str]:
    """Every project this user has a lock file for (live or crashed)."""
    return sorted(p.name[: -len(".lock")] for p in lock_dir().glob(f"{PREFIX}-*.lock"))


def forget(project: str) -> None:
    """Delete a crashed invocation's lock file once its leftovers are removed (never a live one's)."""
    if project not in _held and holder(project) is None:
        lock_path(project).unlink(missing_ok=True)
