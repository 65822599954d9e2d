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


def test_up_argv_never_builds_or_pulls():
    assert compose.up_argv(["broker", "capture"], compose=DC, file=F) == [
        "docker", "compose", "-p", compose.project(), "-f", str(F), "up", "-d", "--no-build", "--pull", "never",
        "broker", "capture"]


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
    projects.release_project(name)
    assert projects.locked_projects() == []


def _container(service: str, status: str = "running", health: str | None = None) -> compose.Container:
    state = {"Status": status, "Running": status == "running", "ExitCode": 0 if status == "running" else 1,
             "StartedAt": "2026-12-05T20:00:00Z", "FinishedAt": "0001-01-01T00:00:00Z"}
    if health is not None:
        state["Health"] = {"Status": health, "FailingStreak": 3 if health == "unhealthy" else 0, "Log": []}
    return compose.Container.from_inspect({"Id": service, "Name": f"/p-{service}-1", "State": state,
                                           "Config": {"Labels": {"com.docker.compose.service": service}}})


class _Lab:
    """compose's calls recorded; the containers' states as a list of snapshots, one per look (the last repeats)."""

    def __init__(self, monkeypatch, *snapshots: list[compose.Container]) -> None:
        self.calls: list[list[str]] = []
        self.snapshots, self.looks = list(snapshots), 0
        monkeypatch.setattr(compose, "run", lambda argv, **_k: self.calls.append(list(argv)))
        monkeypatch.setattr(compose, "containers", self.containers)
        monkeypatch.setattr(compose.projects, "claim", lambda _name: None)
        monkeypatch.setattr(compose, "logs", lambda *_a, **_k: "")
        monkeypatch.setattr(compose.time, "sleep", lambda _s: None)

    def containers(self, name: str | None = None) -> list[compose.Container]:
        self.looks += 1
        return self.snapshots[min(self.looks, len(self.snapshots)) - 1]

    def verbs(self) -> list[list[str]]:  # each call's arguments after the project and the file
        return [call[call.index("-f") + 2:] for call in self.calls]


def test_up_starts_the_gated_services_then_the_others_once_healthy_without_composes_wait(monkeypatch, tmp_path):
    starting = [_container("broker", health="starting"), _container("capture", health="starting")]
    healthy = [_container("broker", health="healthy"), _container("capture", health="healthy")]
    lab = _Lab(monkeypatch, starting, starting, healthy, [*healthy, _container("subscriber")])
    monkeypatch.setattr(compose, "compose_env", lambda _t: {})
    compose.up(Topology(run_dir=tmp_path, port=1883, host_port=1883))
    assert lab.verbs() == [["up", "-d", "--no-build", "--pull", "never", "broker", "capture"],
                           ["up", "-d", "--no-build", "--pull", "never", "--no-deps", "subscriber"]]
    assert lab.looks == 4  # three looks until healthy, one to check that all run


def test_a_gated_service_that_fails_its_health_check_is_named_and_the_others_never_start(monkeypatch, tmp_path):
    sick = [_container("broker", health="unhealthy"), _container("capture", health="healthy")]
    lab = _Lab(monkeypatch, sick, [*sick, _container("subscriber", status="created")])
    monkeypatch.setattr(compose, "compose_env", lambda _t: {})
    with pytest.raises(TestbedError) as err:
        compose.up(Topology(run_dir=tmp_path, port=1883, host_port=1883))
    assert lab.verbs()[1] == ["up", "--no-start", "--no-build", "--pull", "never", "--no-deps", "subscriber"]
    assert err.value.message == "the testbed did not come up: broker failed first (failed its health check)"


def test_a_gated_service_still_starting_at_the_timeout_is_named_with_its_health(monkeypatch, tmp_path):
    starting = [_container("broker", health="starting"), _container("capture", health="healthy")]
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(compose.time, "monotonic", lambda: float(next(clock)))
    _Lab(monkeypatch, starting)
    monkeypatch.setattr(compose, "compose_env", lambda _t: {})
    with pytest.raises(TestbedError) as err:
        compose.up(Topology(run_dir=tmp_path, port=1883, host_port=1883), services=("broker", "capture"), timeout_s=30)
    assert err.value.message == "the testbed did not come up (broker: running, health starting)"


def test_work_given_to_up_runs_while_the_gated_services_become_healthy_and_has_ended_when_up_returns(
        monkeypatch, tmp_path):
    """A kept-up lab makes its clients' containers meanwhile (lab/keptlab.py); what that work raises is up's."""
    import threading

    started, release = threading.Event(), threading.Event()
    starting = [_container("broker", health="starting"), _container("capture", health="starting")]
    healthy = [_container("broker", health="healthy"), _container("capture", health="healthy")]
    lab = _Lab(monkeypatch, starting, healthy)

    def containers(name=None):  # the health wait goes on only once the work has begun: they overlap
        started.wait(5)
        return _Lab.containers(lab, name)

    monkeypatch.setattr(compose, "containers", containers)
    monkeypatch.setattr(compose, "compose_env", lambda _t: {})
    done: list[str] = []

    def work() -> None:
        started.set()
        release.wait(5)
        done.append("made")

    threading.Timer(0.2, release.set).start()
    compose.up(Topology(run_dir=tmp_path, port=1883, host_port=1883), services=("broker", "capture"),
               meanwhile=work)
    assert done == ["made"] and lab.verbs() == [["up", "-d", "--no-build", "--pull", "never", "broker", "capture"]]

    def broken() -> None:
        raise TestbedError("the subscriber's container could not be made")

    with pytest.raises(TestbedError, match="could not be made"):
        compose.up(Topology(run_dir=tmp_path, port=1883, host_port=1883), services=("broker", "capture"),
                   meanwhile=broken)
