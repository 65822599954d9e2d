"""The fault suite's own checks (tests/faults/conftest.py), on fixed input: the leftover probes failing when they
cannot look (no container is started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import impairment_here, processes_of


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
