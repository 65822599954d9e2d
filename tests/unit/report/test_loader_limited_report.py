"""A fleet cell's loader-limited verdict carried beside the broker's 90 %-of-a-core rule: metrics.json's fleet block
(``limited``), summary.csv's ``limited`` column, the report's headline, its fleet and events sections, and
`testbed compare` (analysis/fleetlag.py, report/fleet.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.analysis import fleetlag
from orchestrator.model.cell import CellRecord
from orchestrator.report import events, headline
from orchestrator.report import fleet as fleet_report
from orchestrator.report.compare import limited_of
from orchestrator.report.document import Table
from orchestrator.report.loader import Cell
from orchestrator.report.tables import summary_columns, summary_row
from tests.unit.test_loader_limited import fleet_logs


def _block(loader_late: bool, broker_cores: float | None) -> dict[str, Any]:
    send, conns = fleet_logs(10, 5, start_lag_us={3: 50_000} if loader_late else None)
    block: dict[str, Any] = {"schedule_lag_us": fleetlag.schedule_lag(send, conns), "devices": 10,
                             "messages": {"delivered": 50, "sent": 50}, "one_way_delay_ms": {},
                             "broker": {"broker_cpu_limit": {"steady_mean_cores": broker_cores,
                                                             "broker_ceiling": (broker_cores or 0) >= 0.9,
                                                             "verdict": "broker words"}}}
    block["limited"] = fleetlag.limited(block)
    return block


def test_limited_sits_beside_the_brokers_rule() -> None:
    both, loader, none_ = _block(True, 0.95)["limited"], _block(True, 0.3)["limited"], _block(False, 0.3)["limited"]
    assert (both["loader"], both["broker"], both["labels"]) == (True, True, ["loader-limited", "broker-limited"])
    assert fleetlag.limited_label(both) == "loader-limited; broker-limited"
    assert fleetlag.limited_label(loader) == "loader-limited" and fleetlag.limited_label(none_) == "none"
    unknown = _block(False, None)["limited"]
    assert unknown["broker"] is None and fleetlag.limited_label(unknown) == "none"
    assert fleetlag.limited_label(None) is None  # a single device's cell: n/a
    old = {"schedule_lag_us": {"available": True, "loader_kept_schedule": False}}  # analysed before the connect phase
    assert fleetlag.limited(old)["loader"] is True


def _cell(tmp_path: Path, name: str, metrics: dict[str, Any]) -> Cell:
    folder = tmp_path / name
    folder.mkdir()
    record = CellRecord(cell_id=name, scenario="tls", payload=65, status="ok", spec={"devices": 10})
    return Cell(record, folder, metrics)


def test_summary_csv_and_the_reports_mark_a_loader_limited_cell(tmp_path: Path) -> None:
    late = _cell(tmp_path, "tls-65B-none-10dev-r1", {"fleet": _block(True, 0.3), "events": {"events": [
        {"kind": "broker-restart", "at_s": 5.0, "reconnected_s": {}, "kept_connection": 0, "publishing_s": {},
         "not_back": 0, "first_after": {}, "resumption_hit_rate": None,
         "messages": {"sent": 1, "late": 0, "lost": 0, "lost_not_on_capture": 0, "lost_at_broker": 0,
                      "lost_after_broker": 0}}]}})
    fine = _cell(tmp_path, "tls-65B-none-10dev-r2", {"fleet": _block(False, 0.3)})
    single = _cell(tmp_path, "tls-65B-none-r1", {})
    assert "limited" in summary_columns([])
    assert summary_row(late, [])["limited"] == "loader-limited" and summary_row(fine, [])["limited"] == "none"
    assert summary_row(single, [])["limited"] is None
    lines = json.dumps([b.__dict__ for b in headline._fleet_blocks([late, fine])], default=str)
    assert lines.count("these figures are the loader's as much as the broker's") == 1  # the late cell's line only
    events_blocks = events.events_section([late])
    table = next(b for b in events_blocks if isinstance(b, Table))
    assert table.columns[-1] == "loader" and table.rows[0][0] == "tls-65B-none-10dev-r1"
    assert table.rows[0][-1] == "loader-limited"
    assert "tls-65B-none-10dev-r1: loader-limited" in json.dumps([b.__dict__ for b in events_blocks], default=str)
    fleet_rows = fleet_report.fleet_section([late, fine], {})[2]
    assert isinstance(fleet_rows, Table) and [r[-1] for r in fleet_rows.rows] == ["loader-limited", "none"]
    bullets = fleet_report.fleet_section([late, fine], {})[3]
    assert "tls-65B-none-10dev-r1 (loader-limited): broker words; the loader FELL BEHIND" in str(bullets)
    assert fleet_report.marked(fine) == "tls-65B-none-10dev-r2"
    assert limited_of([fine, late]) == "loader-limited" and limited_of([fine]) == "none"
    assert limited_of([single]) is None


def test_the_headline_marks_a_pairs_handshake_figures_when_a_cell_was_loader_limited(tmp_path: Path) -> None:
    base = _cell(tmp_path, "plain-65B-none-10dev-r1", {"fleet": _block(False, 0.3)})
    late = _cell(tmp_path, "tls-65B-none-10dev-r1", {"fleet": _block(True, 0.3)})
    rows = {"tls_handshake_ms": {"scenario_mean": 12.5}}
    pair = headline.Pair(65, "10dev", "tls", rows, [base], [late])
    assert headline.limited_cells(pair) == ["tls-65B-none-10dev-r1"]
    figures = headline._figures(pair, "plain")
    assert figures[3].text == "12.50 ms, bytes n/a (not on both captures) (loader-limited)"
    clean = headline.Pair(65, "10dev", "tls", rows, [base], [base])
    assert headline.limited_cells(clean) == [] and "(loader-limited)" not in str(headline._figures(clean, "plain")[3])
