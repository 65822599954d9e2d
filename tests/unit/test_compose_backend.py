import socket
from pathlib import Path

import pytest

from orchestrator.backends import compose
from orchestrator.backends.compose import Topology
from orchestrator.errors import TestbedError

F = Path("/x/compose/testbed.yml")
DC = ["docker", "compose"]


def test_up_argv_never_builds_or_pulls_and_waits():
    assert compose.up_argv(["broker", "capture"], timeout_s=60, compose=DC, file=F) == [
        "docker", "compose", "-p", "testbed", "-f", str(F), "up", "-d", "--no-build", "--pull", "never",
        "--wait", "--wait-timeout", "60", "broker", "capture"]


def test_down_argv_removes_volumes_orphans_and_profiled_services():
    assert compose.down_argv(compose=["docker-compose"], file=F) == [
        "docker-compose", "-p", "testbed", "-f", str(F), "--profile", "publisher", "down", "--volumes",
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
