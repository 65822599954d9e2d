"""The SSH master connections a command's playbooks opened, closed when the command ends.

Ansible keeps one master connection per host (ControlMaster, backends/remote_bounds.py CONTROL_PERSIST) so that a
sweep's cells reuse it. Left to itself a master ends ControlPersist seconds after its last use, counted from
whenever the command's last step on that host ended: on a loaded machine, after a cell that lost a host, that was
more than 30 s after the sweep's exit (fault suite, lab-host-paused: two of the user's `ssh ... [mux]` processes
still running). So every command that ran a playbook closes, at its exit, the masters in the control path
folders its playbooks used: its own (ANSIBLE_SSH_CONTROL_PATH_DIR, made per process, short enough for a unix
socket's path) and those an inventory names (``ansible_control_path_dir``, taken as that lab's own).
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CLOSE_TIMEOUT_S = 5
_folders: set[Path] = set()  # the control path folders this process's playbooks used
_own: list[Path] = []  # this process's own folder, once made


def own_folder() -> Path:
    """This process's control path folder (made on first use, removed at exit with what is in it)."""
    if not _own:
        _own.append(Path(tempfile.mkdtemp(prefix="tb-cp-")))
        note_folder(str(_own[0]))
    return _own[0]


def folder_for_playbooks() -> Path:
    """ANSIBLE_SSH_CONTROL_PATH_DIR for this process's playbooks: the user's own setting, else this process's."""
    given = os.environ.get("ANSIBLE_SSH_CONTROL_PATH_DIR")
    if not given:
        return own_folder()
    note_folder(given)
    return Path(given).expanduser()


def note_folder(folder: str) -> None:
    """A control path folder a playbook of this process used: its masters are closed at exit."""
    if not _folders:
        atexit.register(close_all)
    _folders.add(Path(folder).expanduser())


def note_inventory(hostvars: Mapping[str, Mapping[str, Any]]) -> None:
    """The control path folders an inventory's hosts name, closed at exit too."""
    for variables in hostvars.values():
        folder = variables.get("ansible_control_path_dir")
        if isinstance(folder, str) and folder:
            note_folder(folder)


def sockets(folders: Iterable[Path]) -> list[Path]:
    """The unix sockets in ``folders`` (a master's control socket each)."""
    found: list[Path] = []
    for folder in folders:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        found += [p for p in entries if _is_socket(p)]
    return found


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def close(masters: Iterable[Path]) -> list[str]:
    """Ask each master to exit (``ssh -O exit``); the sockets whose master did not answer."""
    ssh = shutil.which("ssh")
    unanswered: list[str] = []
    for sock in masters:
        if ssh is None:
            unanswered.append(str(sock))
            continue
        try:
            proc = subprocess.run([ssh, "-o", f"ControlPath={sock}", "-O", "exit", "testbed-master"],
                                  capture_output=True, timeout=CLOSE_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            unanswered.append(str(sock))
            continue
        if proc.returncode != 0:
            unanswered.append(str(sock))
    return unanswered


def close_all() -> None:
    """At exit: every master of the folders used; this process's own folder removed."""
    close(sockets(_folders))
    for folder in _own:
        shutil.rmtree(folder, ignore_errors=True)
