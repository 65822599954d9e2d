"""The broker's persistence setting is what cell.json records (one constant, lab/brokerconf.py PERSISTENCE)."""

from __future__ import annotations

from orchestrator.lab import brokerconf
from orchestrator.model.cell import CellRecord
from orchestrator.model.scenario import load_scenario


def test_the_rendered_setting_is_the_recorded_one() -> None:
    conf = brokerconf.render_mosquitto_conf(load_scenario("tls"))
    lines = [ln for ln in conf.splitlines() if ln.startswith("persistence ")]
    record = brokerconf.broker_record()
    assert lines == [f"persistence {'true' if record['persistence'] else 'false'}"]
    assert "lost when the broker restarts" in str(record["sessions"])


def test_cell_json_carries_it_only_when_set() -> None:
    base = {"cell_id": "c", "scenario": "tls", "payload": 65, "status": "ok"}
    assert "broker" not in CellRecord.model_validate(base).to_json()
    with_broker = CellRecord.model_validate({**base, "broker": brokerconf.broker_record()}).to_json()
    assert with_broker["broker"]["persistence"] is False
