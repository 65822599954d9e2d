"""backends/docker.py offline: `docker inspect` JSON recorded here (tests/fixtures/docker/) parsed into typed
state, which service failed first, and the engine endpoint resolved the way the docker CLI resolves it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends import docker, docker_endpoint
from orchestrator.errors import TestbedError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker"


def containers(name: str) -> dict[str, docker.Container]:
    return {c.service or c.name: c for c in docker.parse_containers((FIXTURES / name).read_text())}


def test_running_testbed_parsed_into_typed_state():
    up = containers("inspect_tls_up.json")
    assert list(up) == ["broker", "capture", "subscriber"]
    broker = up["broker"]
    assert broker.name == "testbed-broker-1" and broker.image == "testbed-broker:latest"
    # the image it runs, by id (its tag may name a rebuilt image by now)
    assert broker.image_id == "sha256:b5f9d1e0c5648ac0b446247b3015b7326e0f0399be82729f1a207ab73cb450af"
    assert broker.state.running and broker.state.pid > 0 and broker.state.exit_code == 0
    assert broker.state.started_at is not None and broker.state.started_at.tzinfo is not None
    assert broker.state.finished_at is None  # the engine's 0001-01-01 "never"
    assert broker.state.health is not None and broker.state.health.status == "healthy"
    assert broker.ports == ["127.0.0.1:18999->8883"] and broker.ips == ["172.18.0.2"]
    assert up["capture"].ips == []  # network_mode service:broker: no address of its own
    assert up["subscriber"].state.health is None
    assert docker.first_failure(list(up.values())) is None


def test_capture_that_cannot_write_fails_first_and_the_never_started_subscriber_does_not():
    # recorded when compose up --wait exited 0 after "dependency failed to start" (compose 2.40)
    found = containers("inspect_capture_cannot_write.json")
    assert found["capture"].state.status == "exited" and found["capture"].state.exit_code == 1
    assert found["subscriber"].state.status == "created" and found["subscriber"].state.started_at is None
    failure = docker.first_failure(list(found.values()))
    assert failure is not None and failure.service == "capture"
    assert failure.first() == "capture failed first (exited with code 1)"


def test_first_failure_is_the_earliest_exit_not_the_first_listed():
    found = containers("inspect_broker_killed.json")
    # the broker was killed; the publisher lost its connection and exited 1 a few ms later;
    # the capture exited 0 (its interface vanished): not a failure by itself
    assert found["publisher"].state.exit_code == 1 and found["broker"].state.exit_code == 137
    assert docker.failure_of(found["capture"]) is None
    assert found["broker"].state.finished_at < found["publisher"].state.finished_at  # type: ignore[operator]
    reversed_order = [found["publisher"], found["subscriber"], found["capture"], found["broker"]]
    failure = docker.first_failure(reversed_order)
    assert failure is not None and str(failure) == "broker exited with code 137"


def test_unhealthy_running_container_fails_with_its_health_checks_output():
    broker = containers("inspect_broker_unhealthy.json")["broker"]
    health = broker.state.health
    assert broker.state.running and health is not None and health.status == "unhealthy"
    assert health.last_output == "broker port 8883 not listening"
    first_probe = health.first_failing_probe()
    assert first_probe is not None and first_probe.start == health.log[0].start
    failure = docker.failure_of(broker)
    assert failure is not None and failure.at == first_probe.start
    assert failure.what == "failed its health check: broker port 8883 not listening"


def _with_state(fixture: str, **state: object) -> docker.Container:
    raw = json.loads((FIXTURES / fixture).read_text())[0]
    return docker.Container.from_inspect(dict(raw, State=dict(raw["State"], **state)))


def test_oom_kill_and_start_errors_are_failures():
    oom = _with_state("inspect_broker_unhealthy.json", Status="exited", Running=False, OOMKilled=True,
                      ExitCode=137, Health=None)
    assert str(docker.failure_of(oom)) == "broker was killed for lack of memory (OOMKilled, exit code 137)"
    never = _with_state("inspect_broker_unhealthy.json", Status="created", Running=False, ExitCode=127,
                        Health=None, Error="exec: vdevice: not found")
    assert str(docker.failure_of(never)) == "broker could not start (exec: vdevice: not found)"


def test_a_failure_without_a_time_comes_after_timed_ones():
    never = _with_state("inspect_broker_unhealthy.json", Status="created", Running=False, ExitCode=127,
                        Health=None, Error="exec: vdevice: not found", FinishedAt="0001-01-01T00:00:00Z")
    assert docker.failure_of(never) is not None and docker.failure_of(never).at is None  # type: ignore[union-attr]
    killed = containers("inspect_broker_killed.json")["publisher"]
    failure = docker.first_failure([never, killed])
    assert failure is not None and failure.service == "publisher"


def test_image_inspect_parsed():
    raw = json.loads((FIXTURES / "image_inspect_broker.json").read_text())[0]
    image = docker.Image.from_inspect(raw)
    assert image.id.startswith("sha256:") and image.labels["io.testbed.owned"] == "true"


def test_missing_objects_are_not_engine_errors():
    assert docker._only_missing("Error response from daemon: No such container: nope\n")
    assert docker._only_missing("Error: No such object: a\nError: No such object: b\n")
    assert not docker._only_missing("Cannot connect to the Docker daemon at unix:///x. Is the docker daemon running?")


# ----------------------------------------------------------------------------- endpoint resolution

def write_context(config: Path, name: str, host: str, *, skip_verify: bool = False, tls: bool = False) -> Path:
    """A context stored the way `docker context create` stores it."""
    ident = hashlib.sha256(name.encode()).hexdigest()
    meta = config / "contexts" / "meta" / ident
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({
        "Name": name, "Metadata": {"Description": "test"},
        "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": skip_verify}}}))
    if tls:
        material = config / "contexts" / "tls" / ident / "docker"
        material.mkdir(parents=True)
        for f in ("ca.pem", "cert.pem", "key.pem"):
            (material / f).write_text("-----BEGIN-----\n")
    return meta


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "docker-config"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({"auths": {}, "currentContext": "desktop-linux"}))
    write_context(cfg, "desktop-linux", "unix:///Users/me/.docker/run/docker.sock")
    write_context(cfg, "rootless", "unix:///run/user/1000/docker.sock")
    write_context(cfg, "remote", "tcp://10.0.0.5:2376", tls=True)
    return cfg


def test_current_context_from_config_json(config):
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config)})
    assert ep.context == "desktop-linux" and ep.host == "unix:///Users/me/.docker/run/docker.sock"
    assert not ep.tls


def test_docker_context_env_beats_config_json(config):
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "rootless"})
    assert ep.context == "rootless" and ep.host == "unix:///run/user/1000/docker.sock"


def test_docker_host_env_wins_over_every_context(config):
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "rootless",
                                  "DOCKER_HOST": "tcp://127.0.0.1:2375"})
    assert ep.context == "default" and ep.host == "tcp://127.0.0.1:2375" and not ep.tls


def test_docker_host_with_tls_verify_uses_the_cert_path(tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    for f in ("ca.pem", "cert.pem", "key.pem"):
        (certs / f).write_text("x")
    ep = docker_endpoint.resolve_endpoint({"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS_VERIFY": "1",
                                  "DOCKER_CERT_PATH": str(certs), "DOCKER_CONFIG": str(tmp_path / "none")})
    assert ep.tls and ep.tls_verify and ep.ca_cert == certs / "ca.pem" and ep.client_key == certs / "key.pem"
    kwargs = docker_endpoint.sdk_client_kwargs(ep)
    assert kwargs["base_url"] == "tcp://h:2376" and kwargs["tls"].cert == (str(certs / "cert.pem"),
                                                                              str(certs / "key.pem"))


def test_context_tls_material_is_used_and_skip_verify_honoured(config, tmp_path):
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "remote"})
    material = docker_endpoint.context_dir(config, "tls", "remote") / "docker"
    assert ep.tls and ep.tls_verify and ep.ca_cert == material / "ca.pem"
    write_context(config, "insecure", "tcp://10.0.0.6:2376", skip_verify=True, tls=True)
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "insecure"})
    assert ep.tls and not ep.tls_verify
    assert docker_endpoint.sdk_client_kwargs(ep)["tls"].verify is False


def test_no_config_at_all_is_the_default_socket(tmp_path):
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(tmp_path / "missing")})
    assert ep.context == "default" and ep.host == docker.DEFAULT_HOST
    assert docker_endpoint.sdk_client_kwargs(ep) == {"base_url": docker.DEFAULT_HOST, "tls": False,
                                            "use_ssh_client": False}


def test_unknown_context_is_one_clear_error(config):
    with pytest.raises(TestbedError) as exc:
        docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "gone"})
    assert "docker context 'gone' not found" in exc.value.message and "docker context ls" in (exc.value.hint or "")


def test_ssh_context_uses_the_ssh_client(config):
    write_context(config, "over-ssh", "ssh://me@lab-host")
    ep = docker_endpoint.resolve_endpoint({"DOCKER_CONFIG": str(config), "DOCKER_CONTEXT": "over-ssh"})
    assert docker_endpoint.sdk_client_kwargs(ep)["use_ssh_client"] is True


@pytest.mark.skipif(shutil.which("docker") is None, reason="cross-check needs the docker CLI (no engine needed)")
@pytest.mark.parametrize("extra_env", [{}, {"DOCKER_CONTEXT": "rootless"}, {"DOCKER_HOST": "tcp://127.0.0.1:1"}])
def test_same_endpoint_as_the_docker_cli(config, extra_env):
    env = {"DOCKER_CONFIG": str(config), "PATH": "/usr/local/bin:/usr/bin:/bin", **extra_env}
    ours = docker_endpoint.resolve_endpoint(env)
    proc = subprocess.run(["docker", "context", "inspect"], capture_output=True, text=True, env=env, check=True,
                          timeout=30)
    theirs = json.loads(proc.stdout)[0]
    assert theirs["Name"] == ours.context
    assert theirs["Endpoints"]["docker"]["Host"] == ours.host


# ----------------------------------------------------------------------------- privileges and the user

def test_helper_host_config_parsed():
    helper = docker.parse_containers((FIXTURES / "inspect_helper.json").read_text())[0]
    hc = helper.host_config
    assert hc.cap_add == ["CAP_NET_ADMIN"] and hc.cap_drop == ["ALL"] and not hc.privileged  # as the engine writes it
    assert hc.network_mode.startswith("container:") and hc.pid_mode == "" and hc.binds == [] and helper.mounts == []
    assert helper.user == "0:0" and helper.labels["io.testbed.helper"] == "tgt2"


def _fake_info(monkeypatch, security_options: list[str]) -> list[list[str]]:
    calls: list[list[str]] = []

    def fake_run(argv, **_kw):
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, json.dumps(security_options) + "\n", "")

    docker.engine_is_rootless.cache_clear()
    monkeypatch.setattr(docker, "run", fake_run)
    monkeypatch.delenv(docker.USER_ENV, raising=False)
    return calls


def test_containers_run_as_the_user_on_a_rootful_engine(monkeypatch):
    # recorded here: `docker info --format '{{json .SecurityOptions}}'` on engine 20.10.24 (rootful)
    calls = _fake_info(monkeypatch, ["name=seccomp,profile=default"])
    try:
        assert docker.container_user() == f"{os.getuid()}:{os.getgid()}"
        assert calls == [["docker", "info", "--format", "{{json .SecurityOptions}}"]]
    finally:
        docker.engine_is_rootless.cache_clear()


def test_containers_run_as_container_root_under_rootless_docker(monkeypatch):
    # what a rootless engine lists (docs.docker.com/engine/security/rootless: `docker info` shows "rootless")
    _fake_info(monkeypatch, ["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"])
    try:
        assert docker.engine_is_rootless()
        assert docker.container_user() == "0:0"  # container root IS the user; other uids map to subuids
    finally:
        docker.engine_is_rootless.cache_clear()


def test_the_container_user_can_be_set_explicitly(monkeypatch):
    _fake_info(monkeypatch, ["name=seccomp,profile=default"])
    monkeypatch.setenv(docker.USER_ENV, "1234:100")
    try:
        assert docker.container_user() == "1234:100"
    finally:
        docker.engine_is_rootless.cache_clear()


def test_images_are_checked_in_one_inspect_and_the_missing_ones_named(monkeypatch):
    """A sweep checks its four images every cell: one `docker image inspect` for all (missing_images)."""
    import subprocess

    from orchestrator.backends import images
    from orchestrator.errors import ToolError

    calls = []

    def fake_run(argv, **_):
        calls.append(argv)
        have = {"testbed-broker:latest": "sha256:b", "testbed-subscriber:latest": "sha256:s"}
        found = [{"Id": have[t], "RepoTags": [t]} for t in argv[3:] if t in have]
        err = "".join(f"Error response from daemon: No such image: {t}\n" for t in argv[3:] if t not in have)
        return subprocess.CompletedProcess(argv, 1 if err else 0, json.dumps(found), err)

    monkeypatch.setattr(docker, "run", fake_run)
    assert images.missing_images(["broker", "capture", "subscriber", "publisher"]) == [
        "testbed-capture:latest", "testbed-publisher:latest"]
    assert images.missing_images(["broker", "subscriber"]) == []
    assert [argv[:3] for argv in calls] == [["docker", "image", "inspect"]] * 2
    monkeypatch.setattr(docker, "run", lambda argv, **_: subprocess.CompletedProcess(
        argv, 1, "", "Cannot connect to the Docker daemon at unix:///x. Is the docker daemon running?\n"))
    with pytest.raises(ToolError):
        images.missing_images(["broker"])
