"""The axis table builds today's device command lines and board RUN bodies byte for byte.

tests/fixtures/axes/device_bytes.json was written by the hand-written argv and RUN builders before the axis
table (orchestrator/model/axes.py) replaced them: a vdevice, a fleet and a board cell of each kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab.pki import Pki
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import records
from orchestrator.publishers.virtual import publisher_args

EXPECTED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "axes" / "device_bytes.json").read_text())


@pytest.fixture
def lay_pki(tmp_path: Path) -> tuple[Layout, Pki]:
    lay = Layout(tmp_path / "run-1")
    lay.pki.mkdir(parents=True)
    (lay.pki / "ca.crt").write_text("CA-PEM\n")
    (lay.pki / "passwords.txt").write_text("publisher:pw1\nsubscriber:pw2\n")
    return lay, Pki(lay.pki, "ecdsa-p256")


@pytest.mark.parametrize("case", EXPECTED, ids=lambda c: f"{c['scenario']}-{'-'.join(map(str, c['spec'].values()))}")
def test_argv_and_run_body_unchanged(case: dict[str, Any], lay_pki: tuple[Layout, Pki]) -> None:
    lay, pki = lay_pki
    spec = RunSpec(scenario=case["scenario"], **case["spec"])
    scenario = load_scenario(case["scenario"])
    assert publisher_args(scenario, lay, None, spec) == case["argv"]
    if case["run"] is None:
        assert spec.is_fleet
        return
    bodies = [p.encode_body(records.run_cell(scenario, lay, pki, spec, "192.0.2.1", scenario.port, sync)).decode()
              for sync in (None, ("192.0.2.1", 5999))]
    assert bodies == case["run"]
