"""Test-wide options and markers.

Tests under tests/integration/ are marked `docker` automatically. Without a Docker engine (or the
testbed images) they skip with the reason; `--require-docker` (set by `make test` when CI=true) turns
that skip into a failure, so CI never goes green by skipping.
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-docker", action="store_true",
                     help="fail (do not skip) tests that need Docker when it is not available")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    integration = REPO / "tests" / "integration"
    for item in items:
        if integration in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.docker)


@lru_cache(maxsize=1)
def docker_problem() -> str | None:
    try:
        proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker CLI unusable: {exc}"
    if proc.returncode != 0:
        return "no Docker engine answers"
    for tag in ("testbed-broker:latest", "testbed-capture:latest", "testbed-subscriber:latest"):
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False).returncode:
            return f"image {tag} not built (make images)"
    return None


@pytest.fixture(autouse=True)
def _docker_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker") is None:
        return
    problem = docker_problem()
    if problem is None:
        return
    if request.config.getoption("--require-docker"):
        pytest.fail(f"Docker-dependent test cannot run: {problem} (--require-docker is set)")
    pytest.skip(f"needs Docker: {problem}")


@pytest.fixture(autouse=True)
def _netns_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("netns") is None:
        return
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("netns test needs root and CI runs as root")
        pytest.skip("needs root for network namespaces")
