"""Fixtures for tests that drive the real testbed containers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .docker_user import LANE_USERS, DockerUser
from .docker_user import NAME as LANE_USER

TESTBED = str(Path(sys.executable).parent / "testbed")


def run_testbed(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TESTBED, *args], capture_output=True, text=True, timeout=timeout, check=False)


def binomial_bounds(n: int, p: float, tail: float = 1e-4) -> tuple[int, int]:
    """Where a count of n draws at rate p falls but for a `tail` chance on each side. The injectors draw from the
    kernel's unseeded random source, so a 99 % interval fails about one CI run in fifty across our loss tests (stop 19:
    3 of 414 at 3 %, P = 0.17 %); 1e-4 still tells 3 % from 0 % or 10 % at these sample sizes."""
    from scipy.stats import binom

    return int(binom.ppf(tail, n, p)), int(binom.ppf(1 - tail, n, p))


def only_bundle(out: Path) -> Path:
    """The one bundle a sweep wrote into ``out``."""
    found = [p for p in out.iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


class Poller:
    """Looks at the engine every ``every`` seconds in a thread while a command runs (``with Poller():``);
    a subclass says what it looks at (poll)."""

    every = 0.2

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            time.sleep(self.every)

    def __enter__(self):  # noqa: ANN204 - the subclass's own type
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def this_lanes(owner: str) -> bool:
    """Whether a container or network with this owner label is this lane's. The second lane's files run the CLI
    only as their lane's user (tests/unit/test_lanes.py); the first lane's run it as root and as other users too
    (a second user, a lab's), so the first lane's is everything that is not the second lane's user's."""
    second = LANE_USERS[1]
    return owner == second if LANE_USER == second else owner != second


def owned(kind: str, *filters: str) -> list[str]:
    """Our containers or networks (ids) or volumes (names), label io.testbed.owned (and ``filters``, e.g.
    "label=io.testbed.helper"), that this lane made (by their owner label: this_lanes)."""
    ls = {"container": ["ps", "-a"], "network": ["network", "ls"], "volume": ["volume", "ls"]}[kind]
    key = "{{.Name}}" if kind == "volume" else "{{.ID}}"
    where = [arg for f in ("label=io.testbed.owned=true", *filters) for arg in ("--filter", f)]
    proc = subprocess.run(["docker", *ls, *where, "--format", key + ' {{.Label "io.testbed.owner"}}'],
                          capture_output=True, text=True, check=True)
    return [ident for ident, owner in rows(proc.stdout) if this_lanes(owner)]


def helpers() -> list[str]:
    """This lane's impairment helper containers (ids, running or not): label io.testbed.helper, by their owner label
    (this_lanes). The only probe of helpers in the docker tests (tests/unit/test_lanes.py holds it): the second lane
    impairs its own cells beside the first."""
    return owned("container", "label=io.testbed.helper")


def rows(text: str) -> list[tuple[str, str]]:
    """(first, second) word of each line, "" for a missing second."""
    return [(words[0], words[1] if len(words) > 1 else "") for line in text.splitlines() if (words := line.split())]


def service_container(service: str) -> str:
    """The name of the testbed container of compose service ``service`` (any project: each invocation has its
    own, testbed-<user>-<id>, so names are looked up, not assumed); "none" while there is none."""
    proc = subprocess.run(["docker", "ps", "-a", "--filter", "label=io.testbed.owned=true", "--filter",
                           f"label=com.docker.compose.service={service}", "--format",
                           '{{.Names}} {{.Label "io.testbed.owner"}}'], capture_output=True, text=True, check=False)
    names = [name for name, owner in rows(proc.stdout) if this_lanes(owner)]
    return names[0] if names else "none"


@pytest.fixture
def clean_testbed() -> Iterator[None]:
    """Start from nothing and leave nothing behind, whatever the test did."""
    run_testbed("down")
    yield
    run_testbed("down")


# plain and tls at 65 B, 20 messages each: the plan of the session's one 2-cell virtual sweep (two_cell_sweep)
TWO_CELL_PLAN = ("--scenarios", "plain,tls", "--payloads", "65", "--samples", "20", "--interval", "50ms")


@pytest.fixture(scope="session")
def two_cell_sweep(docker_user: DockerUser) -> Path:
    """The bundle of one 2-cell virtual sweep of TWO_CELL_PLAN as the docker-group user, for test_compare.py (the
    bundle compared with a board's and with its rerun) and test_concurrent_users.py (the solo run two side-by-side
    sweeps must match): each file ran this same sweep of its own, about 25 s each time."""
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "two-cell-sweep")
    proc = docker_user.testbed("sweep", *TWO_CELL_PLAN, "--out", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return only_bundle(out)
