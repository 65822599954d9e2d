"""backends/ssh_masters.py: which control path folders a command closes at its exit, and what it asks there.

That a real master ends is the fault suite's case lab-host-paused (tests/faults: nothing of the user's left,
its `ssh ... [mux]` processes included, within 30 s of the fault; in a CI rehearsal on a loaded machine two were
still running, left to ControlPersist's timer); here, the folders and the sockets found in them.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from orchestrator.backends import ssh_masters
from orchestrator.backends.impairment import driver


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh_masters, "_folders", set())
    monkeypatch.setattr(ssh_masters, "_own", [])
    monkeypatch.setattr(ssh_masters.atexit, "register", lambda fn: fn)
    monkeypatch.delenv("ANSIBLE_SSH_CONTROL_PATH_DIR", raising=False)


def test_playbooks_get_a_folder_of_this_process_and_the_inventorys_are_noted(tmp_path: Path) -> None:
    env = driver._ansible_env()
    own = Path(env["ANSIBLE_SSH_CONTROL_PATH_DIR"])
    assert own.is_dir() and own.name.startswith("tb-cp-") and len(str(own)) < 40  # room for ssh's socket name
    ssh_masters.note_inventory({"pub": {"ansible_control_path_dir": str(tmp_path / "cp")}, "broker": {}})
    assert ssh_masters._folders == {own, tmp_path / "cp"}
    ssh_masters.close_all()
    assert not own.exists()  # the process's own folder goes; an inventory's is the lab's


def test_a_users_own_control_path_folder_is_kept_and_closed_too(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_SSH_CONTROL_PATH_DIR", str(tmp_path))
    assert driver._ansible_env()["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(tmp_path)
    assert ssh_masters._folders == {tmp_path} and ssh_masters._own == []


def test_only_sockets_are_asked_and_one_that_is_no_master_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "0123abcd"))  # a master gone without removing its socket: refused at once
    try:
        found = ssh_masters.sockets([tmp_path, tmp_path / "missing"])
        assert found == [tmp_path / "0123abcd"]
        assert ssh_masters.close(found) == [str(tmp_path / "0123abcd")]  # no master answers there
    finally:
        sock.close()
