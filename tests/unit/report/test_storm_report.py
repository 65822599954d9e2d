"""The report's reconnect-storm section and timeline figure (report/storm.py) from a cell's metrics.json ``storm``
(analysis/storm.py on a made-up storm of two devices: a broker restart at 100 s, a link down from 110 to 112 s)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.analysis.storm import storm
from orchestrator.model.cell import CellRecord
from orchestrator.report.document import Table
from orchestrator.report.storm import storm_figures, storm_section
from orchestrator.results.bundle import Cell

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
    cell = _cell({"storm": storm([RESTART, LINK], _conns(), _messages(), cpu)})
    blocks = storm_section([cell])
    table = next(b for b in blocks if isinstance(b, Table))
    assert [r[1] for r in table.rows] == ["broker-restart at 10 s", "link-down at 20 s for 2 s"]
    restart = dict(zip(table.columns, table.rows[0], strict=True))
    assert restart["connected again (s) p50 / p99 / max"] == "1.05 / 1.29 / 1.30 (n 2)" and restart["kept"] == "0"
    assert restart["first after (by kind)"] == "full 2" and restart["lost (where)"] == "1 (1 not on the capture)"
    (figure,) = storm_figures([cell])
    assert figure.filename == "plots/storm_tls-65B-none-resume-ticket-3dev-r1.png"
    assert figure.png.startswith(b"\x89PNG") and figure.png == storm_figures([cell])[0].png  # reproducible


def test_a_bundle_without_events_has_no_section() -> None:
    assert storm_section([_cell({})]) == [] and storm_figures([_cell({})]) == []
