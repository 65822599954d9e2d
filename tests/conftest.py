"""Test-wide options and markers.

Tests under tests/integration/ and tests/faults/ (the fault suite) are marked `docker` automatically. Without a
Docker engine (or the testbed images) they skip with the reason; `--require-docker` (set by `make test` when
CI=true) turns that skip into a failure, so CI never goes green by skipping.

The tiers: `make check` runs `-m "not docker and not netns and not slow"` over tests/unit and tests/firmware
(minutes, no Docker, no root); `make test` runs everything. The tests below are marked `slow` here, in one
place, with the reason each is left to `make test`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import pytest

from tests.integration import docker_user as docker_user_module
from tests.integration.docker_user import DockerUser

REPO = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-docker", action="store_true",
                     help="fail (do not skip) tests that need Docker when it is not available")


# {node id prefix: why `make check` leaves it to `make test`} (a prefix may be a file or one test)
SLOW: dict[str, str] = {
    "tests/firmware/test_chacha_only_config.py": "builds mbedTLS 2.28 from source with the board's chacha-only "
                                                 "config (20 s cached, 1.5 min cold on 2 busy cores)",
    "tests/firmware/test_board_publisher.py::test_a_board_whose_network_drops_fails_the_cell_by_name_and_the_next_too":
        "waits out the publisher's real 10 s and 20 s timeouts (50 s)",
}


DOCKER_FOLDERS = (REPO / "tests" / "integration", REPO / "tests" / "faults")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(folder in Path(str(item.fspath)).parents for folder in DOCKER_FOLDERS):
            item.add_marker(pytest.mark.docker)
        if any(item.nodeid == key or item.nodeid.startswith((key + "::", key + "[")) for key in SLOW):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(scope="session")
def docker_user(pytestconfig: pytest.Config) -> DockerUser:
    """An unprivileged user in the docker group with its own clone and venv (tests/integration/docker_user.py),
    one per session for tests/integration and tests/faults. Creating it needs root (CI runs as root); elsewhere the
    tests using it skip, or fail with --require-docker."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("useradd") is None:
        why = "creating an unprivileged docker-group user needs root, useradd and setpriv"
        if pytestconfig.getoption("--require-docker"):
            pytest.fail(why + " (--require-docker is set)")
        pytest.skip(why)
    return docker_user_module.create()


@pytest.fixture(autouse=True)
def _priority_gate(request: pytest.FixtureRequest) -> Iterator[None]:
    """A netns test needs root; it and a timing test run at niceness -5 when root. `make test` runs the tests without
    Docker under `nice -n 10` beside the docker tests, and these tests measure time with the processes they start (the
    delay line, senders, receivers, vdevice, board-emu), which inherit their niceness: in a CI rehearsal a niced delay
    line under the docker tests' load gave a 5 +/- 2 ms line a 6.7 ms median. Here, with both cores busy at niceness
    0: niced 10, 9.02 ms; at 0, 5.54 ms; at -5, 5.01 and 5.44 ms (the test's bound is 5.5). In another, a niced
    vdevice sent one message of a 20-ms schedule 15 ms late, and board-emu's back-to-back sends were spread past its
    delay line's first release. These tests (about 3 minutes) measure the programs and the kernel's rules, not the
    machine's load: they go ahead of it. The niceness is restored after the test."""
    netns = request.node.get_closest_marker("netns") is not None
    if not netns and request.node.get_closest_marker("timing") is None:
        yield
        return
    if os.geteuid() != 0:
        if netns and os.environ.get("CI") == "true":
            pytest.fail("netns test needs root and CI runs as root")
        if netns:
            pytest.skip("needs root for network namespaces")
        yield  # a timing test as a user: at the niceness it was given
        return
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, -5)  # root may raise its priority
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
