import os
import re
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.backends import compose, projects
from orchestrator.backends.compose import Topology
from orchestrator.errors import TestbedError

F = Path("/x/compose/testbed.yml")
DC = ["docker", "compose"]


def test_up_argv_never_builds_or_pulls_and_waits():
    assert compose.up_argv(["broker", "capture"], timeout_s=60, compose=DC, file=F) == [
        "docker", "compose", "-p", compose.project(), "-f", str(F), "up", "-d", "--no-build", "--pull", "never",
        "--wait", "--wait-timeout", "60", "broker", "capture"]


def test_down_argv_removes_volumes_orphans_and_profiled_services():
    assert compose.down_argv(compose=["docker-compose"], file=F, name="testbed-ann-0123abcd") == [
        "docker-compose", "-p", "testbed-ann-0123abcd", "-f", str(F), "--profile", "publisher", "down", "--volumes",
        "--remove-orphans", "--timeout", "5"]


def test_compose_env_quotes_client_args(tmp_path):
    env = compose.compose_env(Topology(run_dir=tmp_path, port=8883, host_port=18883,
                                       subscriber_args=["--topic", "a b"]))
    assert env["TESTBED_SUBSCRIBER_ARGS"] == "--topic 'a b'"
    assert env["TESTBED_PORT"] == "8883" and env["TESTBED_HOST_PORT"] == "18883"
    assert env["TESTBED_BIND"] == "127.0.0.1"


def test_port_in_use_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(TestbedError) as exc:
            compose.check_port_free("127.0.0.1", port)
    assert f"port {port} on 127.0.0.1 is already in use" in exc.value.message


def test_each_invocation_has_its_own_project_and_names():
    name = compose.project()
    assert re.fullmatch(rf"testbed-{projects.owner_slug()}-[0-9a-f]{{8}}", name)
    assert compose.project() == name  # one per process
    assert compose.container_name("broker") == f"{name}-broker-1"
    assert compose.network_name("lab") == f"{name}_lab"
    assert projects.new_name() != projects.new_name()
    env = compose.compose_env(Topology(run_dir=Path("/x"), port=1883, host_port=1883))
    assert env["TESTBED_OWNER"] == projects.owner_slug()


def test_session_project_is_the_users_own():
    before = compose.project()
    try:
        assert compose.use_session() == f"testbed-{projects.owner_slug()}-session" == compose.project()
    finally:
        compose.use_project(before)


def test_ports_not_asked_for_are_free_ones_and_asked_ones_are_kept(tmp_path):
    t = Topology(run_dir=tmp_path, port=8883, host_port=8883)
    chosen = compose.with_host_port(t, fixed=False)
    assert chosen.host_port != 8883 or chosen == t
    with socket.socket() as s:
        s.bind(("127.0.0.1", chosen.host_port))  # it was free
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert compose.with_host_port(replace(t, host_port=taken), fixed=False).host_port != taken
        with pytest.raises(TestbedError, match=f"port {taken} on 127.0.0.1"):
            compose.with_host_port(replace(t, host_port=taken), fixed=True)


HOLD = """
import sys, time
from orchestrator.backends import projects
projects.claim(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_live_invocations_lock_is_seen_and_a_dead_ones_is_not(tmp_path, monkeypatch):
    """The lock is the kernel's: held while the process lives, free the moment it dies (SIGKILL too)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name = "testbed-ann-0123abcd"
    child = subprocess.Popen([sys.executable, "-c", HOLD, name], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        holder = projects.holder(name)
        assert holder is not None and holder.pid == child.pid, holder
        with pytest.raises(TestbedError, match=f"project {name} \\(pid {child.pid}, "):
            projects.claim(name)
        projects.forget(name)  # a live one's file stays
        assert projects.locked_projects() == [name]
    finally:
        child.kill()
        child.wait()
    assert projects.holder(name) is None
    projects.forget(name)
    assert projects.locked_projects() == []
    projects.claim(name)  # free again: this process takes it
    assert projects.holder(name) is not None and (tmp_path / "testbed" / "projects" / f"{name}.lock").exists()
    projects.release(name)
    assert projects.locked_projects() == []
