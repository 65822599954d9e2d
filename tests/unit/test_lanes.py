"""make test's docker lanes (scripts/test-lanes.sh, tests/conftest.py): what may run in the second lane.

The second lane runs beside the first, as its own user: a file there must stay out of what the first lane's
machine-wide probes and faults touch. These rules read the files' text, so a newcomer who moves a test into the
second lane learns here, not from a CI run that fails one time in ten, what it must not use.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import conftest
from tests.integration import docker_user

REPO = Path(__file__).resolve().parents[2]

# what a second-lane file must not use, and why
FORBIDDEN = {
    r"\bemulate\(|board_emu|--serial-port": "a board: the time echo's fixed UDP port is the machine's",
    r"labhosts|open_lab": "lab hosts: the lab's leftover probe looks at every testbed-host-* container",
    r"--delay-mechanism": "a delay line: its figures are milliseconds, which the lanes side by side distort",
    r"\brun_testbed\(|\bTESTBED\b": "the CLI as root: root's leftovers are the first lane's too",
    r"\bdocker\", \"(rmi|tag|pause|kill|stop)\b": "acting on the engine's shared objects",
}


@pytest.mark.parametrize("path", conftest.SECOND_LANE)
def test_a_second_lane_file_uses_only_what_its_own_user_makes(path: str) -> None:
    file = REPO / path
    assert file.is_file() and file.parent == REPO / "tests" / "integration", path
    assert not any(path == e or path.startswith(e + "/") for e in conftest.EXCLUSIVE), path
    text = file.read_text(encoding="utf-8")
    found = [f"{why} ({m.group(0)!r})" for pattern, why in FORBIDDEN.items() if (m := re.search(pattern, text))]
    assert found == [], f"{path} cannot run in the second lane: {found}"
    assert "docker_user" in text, f"{path}: a second-lane test runs the CLI as its lane's user (docker_user)"


def test_the_rules_catch_what_they_name() -> None:
    """Each rule on a line that breaks it (so that a rule that matches nothing cannot pass as a guard)."""
    samples = {r"\bemulate\(|board_emu|--serial-port": 'board_proc, pty = emulate(docker_user, "x")',
               r"labhosts|open_lab": "from .labhosts import open_lab",
               r"--delay-mechanism": '"--delay-mechanism", "queue"',
               r"\brun_testbed\(|\bTESTBED\b": 'proc = run_testbed("sweep")',
               r"\bdocker\", \"(rmi|tag|pause|kill|stop)\b": '["docker", "rmi", image]'}
    assert samples.keys() == FORBIDDEN.keys()
    assert all(re.search(pattern, line) for pattern, line in samples.items())


def test_helpers_are_probed_only_through_the_lanes_own_probe() -> None:
    """The second lane impairs its own cells (its user's helper containers) beside the first: a docker test looks
    at helpers only through tests/integration/conftest.py helpers(), which keeps to its lane's owner."""
    label = "label=io.testbed.helper"
    files = sorted(f for folder in ("integration", "faults") for f in (REPO / "tests" / folder).rglob("*.py"))
    probing = [str(f.relative_to(REPO)) for f in files if label in f.read_text(encoding="utf-8")]
    assert probing == ["tests/integration/conftest.py"], probing


def test_each_lane_has_its_own_user_and_the_first_is_the_default() -> None:
    assert docker_user.LANE_USERS[0] == "testbed-user" and len(set(docker_user.LANE_USERS)) == 2
    script = (REPO / "scripts" / "test-lanes.sh").read_text(encoding="utf-8")
    assert f"TESTBED_TEST_USER={docker_user.LANE_USERS[1]}" in script
    assert '-m "docker and second_lane"' in script and '-m "docker and not second_lane"' in script
