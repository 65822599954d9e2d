"""Test-wide options, markers and what CI may skip.

Tests under tests/integration/ and tests/faults/ (the fault suite) are marked `docker` automatically. Without a
Docker engine (or the testbed images) they skip with the reason; `--require-docker` (set by `make test` when
CI=true) turns that skip into a failure, so CI never goes green by skipping. Under CI=true any other skip or
xfail fails too, unless tests/skips.py's ALLOWED lists it (the hooks at the end of this file).

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

from tests import skips
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
    "tests/firmware/test_handshake_phases.py::test_tls12_phases_full_and_resumed_agree_with_the_wire":
        "the device's own time against a loopback capture's: make check's load on 2 cores wakes the device late "
        "(ms), which the comparison's bound does not hold (about 25 s with its builds)",
    "tests/firmware/test_handshake_phases.py::test_tls13_phases_full_and_psk_agree_with_the_wire":
        "as the TLS 1.2 one, on the mbedTLS 3.6 build (about 20 s with it)",
    "tests/unit/test_ci_skips.py": "runs pytest in subprocesses: eight test files with their tools off PATH, a "
                                   "netns module as nobody, generated test files (about 45 s in all; make check "
                                   "took 187 s on a quiet host with them, its budget is 180)",
    "tests/unit/test_wheel_contents.py::test_the_sdist_builds_the_same_wheel":
        "builds an sdist and a wheel from it (4 s quiet, 12 s beside the docker tests)",
}


DOCKER_FOLDERS = (REPO / "tests" / "integration", REPO / "tests" / "faults")

# make test (scripts/test-lanes.sh) runs the docker tests in two lanes. The first runs EXCLUSIVE before the second
# lane starts: the tests that need the engine alone (the fault suite restarts dockerd and freezes containers;
# test_doctor_as_user untags an image) and those whose figures are timings on this machine (a delay line's
# milliseconds, a starved loader, a board's planted path delays, a link outage's 1.5 s: 2.06 s in the second lane of a
# rehearsal), then the rest; the second lane runs the SECOND_LANE files, as its own user (testbed-userb), beside the
# first lane's rest, once the exclusive part is over and the tests without Docker are done. A file in the second lane
# uses only docker_user and its owner-scoped probes (tests/integration/conftest.py owned, helpers): no board (the time
# echo's fixed port), no lab hosts, no delay line (its figures are timings); tests/unit/test_lanes.py holds those
# rules. Measured: 2270 s in one lane at stop 46's rehearsal; 863 + 1640 s in the first lane and 504 s in the second
# at stop 47's (the first lane's rest ran slower beside the second), 863 + 1611 and 503 s in stop 47's CI, which
# moved test_docker_user and test_lifecycle_sweep (about 350 s) to the second lane; then 1063 + 1287 s in the first
# lane and 774 s in the second at this stop's rehearsal: the user's impaired runs (about 80 s) moved there too.
EXCLUSIVE = ("tests/faults", "tests/integration/test_doctor_as_user.py", "tests/integration/test_delay_queue.py",
             "tests/integration/test_fleet_loader_limited.py", "tests/integration/test_board_impaired.py",
             "tests/integration/test_fleet_events.py")
SECOND_LANE = (
    "tests/integration/test_capture_mode.py",
    "tests/integration/test_device_stack_sweep.py",
    "tests/integration/test_docker_user.py",
    "tests/integration/test_fleet_lifecycle.py",
    "tests/integration/test_fleet_sweep.py",
    "tests/integration/test_impairment_user_runs.py",
    "tests/integration/test_installed_tool.py",
    "tests/integration/test_lifecycle_sweep.py",
    "tests/integration/test_qos_sweep.py",
    "tests/integration/test_rabbitmq_sweep.py",
    "tests/integration/test_websocket_sweep.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(folder in Path(str(item.fspath)).parents for folder in DOCKER_FOLDERS):
            item.add_marker(pytest.mark.docker)
        if item.nodeid.startswith(tuple(f"{path}::" for path in SECOND_LANE)):
            item.add_marker(pytest.mark.second_lane)
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


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A netns test needs root: without it, skip, or fail under CI=true (CI runs as root). A hook, not a fixture:
    it runs before every fixture of the test (a module's included) and after skip marks only."""
    if item.get_closest_marker("netns") is not None and os.geteuid() != 0:
        if skips.in_ci():
            pytest.fail("netns test needs root and CI runs as root")
        pytest.skip("needs root for network namespaces")


@pytest.fixture(autouse=True)
def _priority_gate(request: pytest.FixtureRequest) -> Iterator[None]:
    """A netns test (root: pytest_runtest_setup) and a timing test run at niceness -5 when root. `make test` runs the
    tests without Docker under `nice -n 10` beside the docker tests, and these tests measure time with the processes
    they start (the delay line, senders, receivers, vdevice, board-emu), which inherit their niceness: in a CI
    rehearsal a niced delay line under the docker tests' load gave a 5 +/- 2 ms line a 6.7 ms median. Here, with both
    cores busy at niceness 0: niced 10, 9.02 ms; at 0, 5.54 ms; at -5, 5.01 and 5.44 ms (the test's bound is 5.5). In
    another, a niced vdevice sent one message of a 20-ms schedule 15 ms late, and board-emu's back-to-back sends were
    spread past its delay line's first release. These tests (about 3 minutes) measure the programs and the kernel's
    rules, not the machine's load: they go ahead of it. The niceness is restored after the test."""
    timed = request.node.get_closest_marker("netns") or request.node.get_closest_marker("timing")
    if timed is None or os.geteuid() != 0:
        yield  # a timing test as a user: at the niceness it was given
        return
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, -5)  # root may raise its priority
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


# ---- under CI=true, a skip or xfail that tests/skips.py does not allow fails the run

def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return str(wasxfail)
    longrepr = report.longrepr
    message = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return message.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """An unlisted skip (setup or call) or xfail of a test becomes a failure that says so, with its reason."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or not skips.in_ci():
        return
    refused = skips.refusal(report.nodeid, _skip_reason(report), xfail=hasattr(report, "wasxfail"))
    if refused is not None:
        report.outcome = "failed"
        report.longrepr = refused
        if hasattr(report, "wasxfail"):
            del report.wasxfail


_REFUSED_COLLECTIONS: list[str] = []  # a module skipped while it was collected (allow_module_level, importorskip)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and skips.in_ci():
        refused = skips.refusal(report.nodeid, _skip_reason(report))
        if refused is not None:
            _REFUSED_COLLECTIONS.append(f"{report.nodeid}: {refused}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _REFUSED_COLLECTIONS and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REFUSED_COLLECTIONS:
        terminalreporter.section("skipped at collection, which CI=true does not allow (the run fails)", red=True)
        for line in _REFUSED_COLLECTIONS:
            terminalreporter.write_line(line)
