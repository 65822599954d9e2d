"""Cells that ran another MQTT protocol (QoS, version, topic alias, session, in-flight window) are another condition
in a bundle's summary and comparisons, never repeats of the study's QoS 0 / 3.1.1 cell (results/bundle.py)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.model.cell import CellRecord
from orchestrator.results.bundle import Cell, condition, protocol


def _cell(**spec: object) -> Cell:
    record = CellRecord.model_validate({"cell_id": "c", "scenario": "tls", "payload": 65, "status": "ok",
                                        "spec": {"qos": 0, "mqtt": "3.1.1", **spec}})
    return Cell(record, Path("c"))


def test_the_studys_protocol_adds_nothing() -> None:
    assert protocol(None) == "" and protocol({"qos": 0, "mqtt": "3.1.1", "inflight": 1, "session": "clean"}) == ""
    assert _cell().condition == "none" == condition("none")


def test_each_protocol_is_its_own_group() -> None:
    cells = [_cell(), _cell(qos=1), _cell(qos=2), _cell(mqtt="5"), _cell(qos=2, mqtt="5", topic_alias="on"),
             _cell(qos=1, session="persistent", inflight=8)]
    assert [c.condition for c in cells] == ["none", "none + qos1", "none + qos2", "none + mqtt5",
                                            "none + qos2 mqtt5 alias", "none + qos1 persistent-session inflight8"]
    assert len({c.group for c in cells}) == len(cells)
