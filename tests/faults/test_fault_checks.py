"""The fault suite's own checks (tests/faults/conftest.py), on fixed input: which component an error names first,
and the leftover probes failing when they cannot look (no container is started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import COMPONENTS, first_component, impairment_here, processes_of

# errors the suite saw (issue 23's table), each with the component it names first
SEEN = {
    "broker failed first (exited with code 137); publisher: PeerClosed: sending PUBLISH failed: send() failed: "
    "Connection reset by peer": "broker",
    "capture failed first (exited with code 137); publisher: ok": "capture",
    "the delay line (testbed-delayline, queue 7357) in testbed-testbed-user-c0bdaeca-router-1 is not running "
    "(pid 54): the impairment did not hold for the whole cell": "delay line",
    "disk full: cannot write /home/testbed-user/work/faults/disk-full/20261205T073535Z-disk-full/runs/"
    "plain-100B-none-r1/cell.json": "disk",
    "interrupted by the user (SIGTERM)": "user",
    "the Docker engine stopped answering while removing testbed-testbed-user-abf80a03-subscriber-1": "engine",
    "publish: host testbed-host-pub became unreachable": "host",
    "the board on /home/testbed-user/work/fault-board.pty (115200 Bd) went away: device reports readiness to read "
    "but returned no data (unplugged?)": "board",
}


@pytest.mark.parametrize("error", list(SEEN))
def test_the_first_component_named(error: str) -> None:
    assert first_component(error) == SEEN[error]


def test_names_that_only_contain_a_component_do_not_count() -> None:
    """A container's, a host's, a path's and a file's name hold a component's word without naming it; a sentence's
    last word and a word in another case do name it; the earliest named wins, wherever the others are."""
    assert first_component("testbed-x-subscriber-1 in /home/testbed-user/capture.pcapng on testbed-host-pub") is None
    assert first_component("lost /tmp/broker and subscriber_args, then the Broker.") == "broker"
    assert first_component("publisher: ok; broker failed first (exited with code 137)") == "publisher"
    assert first_component("published by the router") == "router"  # "published" is not "publisher"
    assert first_component("") is None
    for component in COMPONENTS:
        assert first_component(f"x: {component.upper()}, then the broker") == component


def _path_of(tmp_path: Path, tools: dict[str, str]) -> str:
    """A PATH holding only ``tools`` (name: shell script body)."""
    for name, body in tools.items():
        exe = tmp_path / name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(0o755)
    return str(tmp_path)


@pytest.mark.parametrize("broken", ["nft", "tc", "ps"])
@pytest.mark.parametrize("how", ["missing", "failing"])
def test_a_probe_that_cannot_look_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str,
                                        how: str) -> None:
    """With `nft`, `tc` or `ps` missing from PATH, or exiting non-zero, the leftover probes fail the test instead
    of answering "nothing left"; with all three answering (empty), they answer nothing left."""
    answering = {"nft": "exit 0", "tc": "exit 0", "ps": "exit 0"}
    monkeypatch.setenv("PATH", _path_of(tmp_path, answering))
    assert impairment_here() == [] and processes_of(os.getuid()) == []
    (tmp_path / broken).unlink()
    if how == "failing":
        _path_of(tmp_path, {broken: "echo 'Operation not permitted' >&2; exit 1"})
    with pytest.raises(pytest.fail.Exception, match=f"the leftover probe `{broken} .*` "
                       + ("could not run" if how == "missing" else r"failed \(exit 1\): Operation not permitted")):
        impairment_here() if broken != "ps" else processes_of(os.getuid())
