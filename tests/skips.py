"""What a test may skip in CI, in one place, and the one way a test says it cannot run here.

`make test` is what CI runs (CI=true, as root): it has installed every host tool the tests run
(scripts/ensure-system.sh test: g++, cmake, libmbedtls-dev, mosquitto, tshark, chromium, ...), the venv's
extras (PlatformIO comes with `.[dev,esp32]`), a Docker engine and the images. There, a test that cannot run
is a failure, not a skip: `skip_or_fail` skips elsewhere (a laptop without g++) and fails under CI=true.

Whatever skips anyway under CI=true (a skip mark, a `pytest.skip` that did not go through `skip_or_fail`, an
xfail) fails the run unless ALLOWED lists it (tests/conftest.py's hooks): an entry names the tests by node id
(a file, a test, or one parametrized case, as a prefix), the reason the skip must give (a regular expression
matched against the whole reason) and, where the skip rests on a fact of this machine, a check of that fact made
here independently of the test's own, so that a listed reason given for another cause still fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """CI=true, as the Makefile reads it (`make test` passes --require-docker then)."""
    return os.environ.get("CI") == "true"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with the reason, or under CI=true fail with it: `make test` installs what the tests need."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: `make test` provides it, so this is a failure, not a skip)")
    pytest.skip(reason)


def tools_gate(problem: Callable[[], str | None]) -> Callable[[], None]:
    """A module's autouse fixture that runs before the module's other fixtures (after the root gate of
    tests/conftest.py): ``problem()`` names a missing tool, which skips the module, or fails it under CI=true,
    where `make test` installs them. Assign it to a module-level name: ``_tools = tools_gate(_problem)``."""

    @pytest.fixture(scope="module", autouse=True)
    def _tools() -> None:
        found = problem()
        if found:
            skip_or_fail(found)

    return _tools


@lru_cache(maxsize=1)
def kernel_has_netem() -> bool | None:
    """Can tc add a netem qdisc on this kernel? Tried on the loopback of a network namespace that vanishes
    with the command (a user namespace too when not root). None when the probe itself cannot run."""
    if shutil.which("unshare") is None or shutil.which("tc") is None:
        return None
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    try:
        proc = subprocess.run(["unshare", *userns, "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                               "delay", "1ms"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == 0:
        return True
    # tc's words when the kernel has no such qdisc (and cannot load it); anything else is no answer
    return False if "qdisc kind is unknown" in proc.stderr else None


@dataclass(frozen=True)
class Allowed:
    nodeid: str  # a node id or its prefix: a file, a test, a parametrized test (then every case)
    reason: str  # a regular expression the skip's whole reason must match
    why: str  # why CI may skip it
    holds: Callable[[], bool] | None = None  # the fact the skip rests on, checked here independently


def _lacks_netem() -> bool:
    return kernel_has_netem() is False


def _has_netem() -> bool:
    return kernel_has_netem() is True


# The netem pair: one of each pair runs on any kernel, the other is ruled out by it (this one has no sch_netem).
ALLOWED: tuple[Allowed, ...] = (
    Allowed("tests/unit/test_impairment_netns.py::test_netem_delay_is_applied_where_the_kernel_has_it",
            r"kernel lacks sch_netem", "netem cannot be applied on a kernel without sch_netem; its other half "
            "(test_delay_profile_without_netem_fails_before_anything_is_applied) runs there", _lacks_netem),
    Allowed("tests/unit/test_impairment_netns.py::test_delay_profile_without_netem_fails_before_anything_is_applied",
            r"kernel has sch_netem", "the refusal without sch_netem cannot happen on a kernel that has it; its "
            "other half (test_netem_delay_is_applied_where_the_kernel_has_it) runs there", _has_netem),
    Allowed("tests/integration/test_delay_queue.py::"
            "test_queue_and_netem_give_the_same_uplink_median_where_the_kernel_has_netem",
            r"this kernel lacks sch_netem: .*", "compares the delay line with netem, which a kernel without "
            "sch_netem cannot run; the delay line's own tests there run everywhere", _lacks_netem),
)


def _covers(prefix: str, nodeid: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "["))


def refusal(nodeid: str, reason: str, *, xfail: bool = False) -> str | None:
    """None when ALLOWED lets `nodeid` skip with `reason` here; else why the skip fails the run under CI=true."""
    what = "xfail" if xfail else "skip"
    for entry in ALLOWED:
        if xfail or not _covers(entry.nodeid, nodeid) or not re.fullmatch(entry.reason, reason):
            continue
        if entry.holds is not None and not entry.holds():
            return (f"{what} under CI=true with a listed reason that does not hold on this machine "
                    f"(tests/skips.py's own check does not confirm it): {reason}")
        return None
    return f"{what} under CI=true that tests/skips.py's ALLOWED does not list: {reason}"
