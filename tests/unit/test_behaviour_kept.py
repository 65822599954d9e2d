"""Behaviour kept across the layout step: today's analysis and report give the same bytes as the code before.

tests/golden/expected/ was written by tests/golden/regenerate.py with the code BEFORE the wave-2 moves
(commit 669f0e8): every reference capture and the fixture capture re-analysed into one bundle. Any
change to these bytes is a change of measured results and must be made on purpose (regenerate, and
say why in the commit).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import regenerate


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (regenerate.reference_dir() / "README.md").is_file():
        pytest.fail(f"reference captures not found at {regenerate.reference_dir()}: set TESTBED_REFERENCE_CAPTURES")
    return regenerate.build(tmp_path_factory.mktemp("golden") / "bundle")


def test_every_compared_file_is_pinned(rebuilt: Path) -> None:
    rels = regenerate.compared_files(rebuilt)
    assert len(rels) == 2 + 2 * 9  # summary + comparisons; metrics + per_message of 9 runs
    missing = [str(r) for r in rels if not (regenerate.EXPECTED / r).is_file()]
    assert missing == []


@pytest.mark.parametrize("name", ["metrics.json", "per_message.csv", "summary.csv", "comparisons.csv"])
def test_outputs_are_byte_identical(rebuilt: Path, name: str) -> None:
    rels = [r for r in regenerate.compared_files(rebuilt) if r.name == name]
    assert rels
    differ = [str(r) for r in rels if (rebuilt / r).read_bytes() != (regenerate.EXPECTED / r).read_bytes()]
    assert differ == [], f"outputs changed: {differ}"
