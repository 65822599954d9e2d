"""The report's QoS exchanges section (report/exchanges.py) from cells' metrics.json ``exchanges``."""

from __future__ import annotations

from pathlib import Path

from orchestrator.model.cell import CellRecord
from orchestrator.report.document import Table
from orchestrator.report.exchanges import exchanges_section, saving_rows
from orchestrator.results.bundle import Cell


def _cell(scenario: str, qos: int, mqtt: str, mqtt_b: int, wire_b: int, alias: str = "off") -> Cell:
    record = CellRecord.model_validate({"cell_id": f"{scenario}-{qos}-{mqtt}-{alias}", "scenario": scenario,
                                        "payload": 65, "status": "ok",
                                        "spec": {"qos": qos, "mqtt": mqtt, "topic_alias": alias}})
    block = {"messages": 20, "complete": 20, "dup_resends": 0, "median_mqtt_bytes_up": mqtt_b - 4,
             "median_mqtt_bytes_down": 4, "median_mqtt_bytes": mqtt_b, "median_wire_bytes": wire_b,
             "median_packets_up": 1, "median_packets_down": 1, "median_ack_ms_device": 0.5}
    return Cell(record, Path("c"), metrics={"exchanges": block})


def test_mqtt5_savings_beside_the_tls_cost() -> None:
    cells = [_cell("tls", 1, "3.1.1", 90, 132), _cell("tls", 1, "5", 91, 133), _cell("tls", 1, "5", 80, 122, "on")]
    assert saving_rows(cells) == [("tls", "1", "5", "90", "91", "-1", "42"),
                                  ("tls", "1", "5 + alias", "90", "80", "10", "42")]
    tables = [b for b in exchanges_section(cells) if isinstance(b, Table)]
    assert [row[7] for row in tables[0].rows] == ["42", "42", "42"]  # TLS B = wire - MQTT
    assert tables[0].rows[2][2] == "5 + alias"


def test_no_section_without_exchanges() -> None:
    record = CellRecord.model_validate({"cell_id": "c", "scenario": "tls", "payload": 65, "status": "ok"})
    assert exchanges_section([Cell(record, Path("c"), metrics={})]) == []


def test_qos0_cells_are_the_baseline_only_beside_qos1_or_mqtt5() -> None:
    """Every single device's cell has exchanges now: at QoS 0 over 3.1.1 the PUBLISH alone. A report of such cells
    alone has no section (a study at QoS 0 keeps its report); beside a QoS 1 or MQTT 5 cell they are rows, and
    MQTT 5's saving at QoS 0 has its 3.1.1 baseline."""
    qos0 = [_cell("tls", 0, "3.1.1", 84, 105), _cell("plain", 0, "3.1.1", 84, 84)]
    assert exchanges_section(qos0) == []
    cells = [*qos0, _cell("tls", 0, "5", 73, 94, "on"), _cell("tls", 1, "3.1.1", 90, 132)]
    tables = [b for b in exchanges_section(cells) if isinstance(b, Table)]
    assert [row[0] for row in tables[0].rows] == [c.record.cell_id for c in cells]
    assert saving_rows(cells) == [("tls", "0", "5 + alias", "84", "73", "11", "21")]
