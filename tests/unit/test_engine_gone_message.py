"""A container inspect the engine does not answer (a dockerd stopped or being restarted mid-cell) fails naming the
engine first, not as 'docker failed (exit 1): docker inspect ...' (fault suite, dockerd-restarted: that line named no
component). Offline: a docker CLI on PATH that answers as the real one does without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends import docker
from orchestrator.errors import ToolError

NO_ENGINE = {
    "refused": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    "dropped": "error during connect: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.41/containers/x/json\": EOF",
}


def _docker_saying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str) -> None:
    exe = tmp_path / "docker"
    exe.write_text(f"#!/bin/sh\necho '[]'\necho '{stderr}' >&2\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize("how", list(NO_ENGINE))
def test_no_engine_is_named_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    _docker_saying(tmp_path, monkeypatch, NO_ENGINE[how])
    with pytest.raises(ToolError) as caught:
        docker.inspect_containers(["testbed-x-capture-1"])
    assert str(caught.value) == "the Docker engine stopped answering while inspecting testbed-x-capture-1"
    assert caught.value.hint == docker.ENGINE_HINT and NO_ENGINE[how][:20] in (caught.value.evidence or "")


def test_other_failures_keep_the_commands_own_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _docker_saying(tmp_path, monkeypatch, "Error response from daemon: something else")
    with pytest.raises(ToolError, match=r"^docker failed \(exit 1\): docker inspect --type container x$"):
        docker.inspect_containers(["x"])
