"""A bundle written before an axis became listable resumes: its recorded plan names the same cells.

tests/fixtures/bundles/plan-bbb1e5a.json is the plan a sweep recorded at commit bbb1e5a (``--scenarios plain,tls
--payloads 65,100 --samples 200``), when ``qos`` was one value for every cell (``"qos": 0``); qos is a list now.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import TestbedError
from orchestrator.results import manifest as bundles

FIXTURE = Path(__file__).parents[1] / "fixtures" / "bundles" / "plan-bbb1e5a.json"


def test_a_plan_recorded_before_qos_was_a_list_gives_the_same_cells(tmp_path: Path) -> None:
    recorded = json.loads(FIXTURE.read_text())
    assert recorded["qos"] == 0  # the fixture is what it says
    plan = bundles.plan_of({"plan": recorded}, tmp_path)
    assert sorted(c.cell_id for c in plan.cells()) == [
        "plain-100B-none-r1", "plain-65B-none-r1", "tls-100B-none-r1", "tls-65B-none-r1"]
    assert {c.qos for c in plan.cells()} == {0}
    assert plan.samples == 200 and plan.seed == recorded["seed"]


def test_the_listing_keeps_lists_and_leaves_what_is_wrong_to_the_model(tmp_path: Path) -> None:
    recorded = json.loads(FIXTURE.read_text()) | {"qos": [0, 1]}
    assert sorted({c.qos for c in bundles.plan_of({"plan": recorded}, tmp_path).cells()}) == [0, 1]
    with pytest.raises(TestbedError, match="plan"):
        bundles.plan_of({"plan": recorded | {"qos": 7}}, tmp_path)
