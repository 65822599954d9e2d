"""The report's events section and timeline figure (report/events.py) from a cell's metrics.json ``events``
(analysis/events.py on a made-up cell of two devices: a broker restart at 100 s, a link down from 110 to 112 s)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis.events import events_metrics
from orchestrator.cli.main import main
from orchestrator.model.cell import CellRecord
from orchestrator.model.layout import SCHEMA_VERSIONS, BundleLayout
from orchestrator.report import build
from orchestrator.report.document import Table
from orchestrator.report.events import events_figures, events_section
from orchestrator.results.bundle import Cell
from tests.unit.report.conftest import BundleFactory

RESTART = {"kind": "broker-restart", "at_s": 10.0, "duration_s": 0.0, "t_start": 100.0, "broker_back": 100.5,
           "t_end": 100.5, "at_epoch": 100.0}
LINK = {"kind": "link-down", "at_s": 20.0, "duration_s": 2.0, "t_start": 110.0, "t_down": 110.01, "t_up": 112.0,
        "t_end": 112.0, "at_epoch": 110.0}


def _conns() -> pd.DataFrame:
    rows = [("f0000", 0, 90.0, 90.1, 100.0, "full"), ("f0001", 0, 91.0, 91.1, 100.0, "full"),
            ("f0000", 1, 100.6, 100.8, None, "full"), ("f0001", 1, 101.0, 101.3, None, "full")]
    return pd.DataFrame(rows, columns=["device", "device_conn", "syn_time", "connack_time", "end_time", "handshake"])


def _messages() -> pd.DataFrame:
    rows = [("f0000", 0, 99.0, 99.01, 1), ("f0000", 1, 100.1, None, 0), ("f0000", 2, 101.0, 101.01, 1),
            ("f0001", 0, 101.5, 101.51, 1), ("f0000", 3, 111.0, 112.2, 1), ("f0001", 1, 113.0, 113.01, 1)]
    pm = pd.DataFrame(rows, columns=["device", "seq", "t_send", "broker_in", "recv_count"])
    pm["t_send_us"] = (pm.pop("t_send") * 1e6).round()
    pm["broker_in_us"] = pm.pop("broker_in") * 1e6
    pm["broker_out_us"] = pm["broker_in_us"] + 1000.0
    return pm


def _cell(metrics: dict[str, object]) -> Cell:
    record = CellRecord.model_validate({"cell_id": "tls-65B-none-resume-ticket-3dev-r1", "scenario": "tls",
                                        "payload": 65, "status": "ok"})
    return Cell(record, Path("c"), metrics=metrics)


def test_each_event_is_a_row_and_the_cell_a_timeline() -> None:
    cpu = [[95.0 + i, 1e9 * 0.1 * i] for i in range(20)]
    cell = _cell({"events": events_metrics([RESTART, LINK], _conns(), _messages(), cpu)})
    blocks = events_section([cell])
    table = next(b for b in blocks if isinstance(b, Table))
    assert [r[1] for r in table.rows] == ["broker-restart at 10 s", "link-down at 20 s for 2 s"]
    restart = dict(zip(table.columns, table.rows[0], strict=True))
    assert restart["connected again (s) p50 / p99 / max"] == "1.05 / 1.29 / 1.30 (n 2)" and restart["kept"] == "0"
    assert restart["first after (by kind)"] == "full 2" and restart["lost (where)"] == "1 (1 not on the capture)"
    (figure,) = events_figures([cell])
    assert figure.filename == "plots/events_tls-65B-none-resume-ticket-3dev-r1.png"
    assert figure.png.startswith(b"\x89PNG") and figure.png == events_figures([cell])[0].png  # reproducible


def test_a_bundle_without_events_has_no_section() -> None:
    assert events_section([_cell({})]) == [] and events_figures([_cell({})]) == []


def test_a_bundle_from_before_the_rename_reports_the_same(bundle_factory: BundleFactory,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.json version 1 called the block ``storm``; `testbed report` on such a bundle (runs without a raw
    capture are left as they are and reported from their metrics.json) gives the report of today's key, byte for
    byte, section and figure alike. The bundle's other figures, which read no events, are left out of both reports
    (each costs a second or more to draw)."""
    monkeypatch.setattr(build, "make_figures", lambda bundle, order: [])
    root, _ = bundle_factory(scenarios=("tls",), payloads=(65,), samples=20)
    run = BundleLayout(root).run("tls-65B-none-r1")
    cpu = [[95.0 + i, 1e9 * 0.1 * i] for i in range(20)]
    block = events_metrics([RESTART, LINK], _conns(), _messages(), cpu)
    cell = json.loads(run.cell.read_text())
    run.cell.write_text(json.dumps({**cell, "events": [RESTART, LINK]}), encoding="utf-8")
    metrics = json.loads(run.metrics.read_text())

    def report_of(data: dict[str, object]) -> tuple[str, str, bytes | None]:
        run.metrics.write_text(json.dumps(data), encoding="utf-8")
        assert main(["report", str(root)]) == 0, capsys.readouterr().err
        figure = root / "plots" / f"events_{run.root.name}.png"
        return (BundleLayout(root).report_md.read_text(), BundleLayout(root).report_html.read_text(),
                figure.read_bytes() if figure.exists() else None)

    old = report_of({**metrics, "schema_version": 1, "storm": block})
    assert "\n## Events\n" in old[0] and "| tls-65B-none-r1 | broker-restart at 10 s |" in old[0]
    assert old[2] is not None and old[2].startswith(b"\x89PNG")
    shutil.rmtree(root / "plots")
    new = report_of({**metrics, "schema_version": SCHEMA_VERSIONS["metrics"], "events": block})
    assert old == new
