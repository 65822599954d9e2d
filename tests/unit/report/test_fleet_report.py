"""The report's fleet section (report/fleet.py): one row per fleet cell, the verdicts, devices.csv, the delay
pooled over repeats; fleet sizes kept apart when cells are grouped; bundles without a fleet unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis import fleet
from orchestrator.report.build import build_report
from orchestrator.report.fleet import COLUMNS, fleet_section
from orchestrator.report.loader import condition, load_bundle, per_seq, split_condition
from tests.unit.report.conftest import make_bundle


def fleet_metrics(base: dict[str, Any], delays: np.ndarray, lost: int) -> dict[str, Any]:
    limit = {"verdict": "not the broker's ceiling: its CPU averaged 0.30 cores ...", "broker_ceiling": False}
    block = {
        "devices": 2, "connected": 2, "failed": {"devices": 0, "by_error": {}, "errors": []},
        "messages": {"expected": 200, "sent": 200, "delivered": 200 - lost, "lost": lost,
                     "lost_at": {fleet.NOT_ON_CAPTURE: 0, fleet.NOT_FORWARDED: lost, fleet.NOT_RECEIVED: 0},
                     "capture_coverage": {"lost_at_reliable": True}},
        "one_way_delay_ms": {"median": float(np.median(delays)), "p99": float(np.percentile(delays, 99)),
                             "histogram": fleet.histogram(delays)},
        "connection_setup_ms": {"handshake_ms": {"p50": 11.5, "p99": 30.25}},
        "schedule_lag_us": {"steady": {"p99": 850.0}, "all": {"p99": 41_000.0},
                            "verdict": "the loader kept its schedule: ..."},
        "broker": {"per_message": {"cpu_ms_per_event": 0.0721, "ci95_low": 0.06, "ci95_high": 0.08},
                   "per_handshake": {"cpu_ms_per_event": 12.8, "ci95_low": None},
                   "memory_per_client": {"bytes_per_client": 30720.0}, "broker_cpu_limit": limit},
        "cpu": {"loader_us_per_message": 94.37},
    }
    return {**base, "fleet": block}


def add_fleet_cell(root: Path, repeat: int, delays: np.ndarray, lost: int) -> str:
    """A fleet cell (2 devices x 100) beside the bundle's tls cell, its metrics the tls cell's plus a fleet block."""
    runs = root / "runs"
    cell_id = f"tls-65B-none-2dev-r{repeat}"
    folder = runs / cell_id
    folder.mkdir()
    (folder / "cell.json").write_text(json.dumps({"cell_id": cell_id, "scenario": "tls", "payload": 65,
                                                  "impairment": "none", "repeat": repeat, "status": "ok",
                                                  "spec": {"devices": 2, "samples": 100}}))
    base = json.loads((runs / "tls-65B-none-r1" / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps(fleet_metrics(base, delays, lost)))
    pm = pd.read_csv(runs / "tls-65B-none-r1" / "per_message.csv")
    pm.insert(0, "device", [f"f000{i % 2}" for i in range(len(pm))])
    pm["seq"] = np.arange(len(pm)) // 2
    pm["delay_ms"] = delays
    pm.to_csv(folder / "per_message.csv", index=False)
    (folder / "devices.csv").write_text("device,sent\nf0000,100\nf0001,100\n")
    return cell_id


def test_the_fleet_section_lists_each_fleet_cell_and_pools_its_repeats(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, scenarios=("plain", "tls"), payloads=(65,), samples=200)
    rng = np.random.default_rng(3)
    first = add_fleet_cell(root, 1, 1.0 + rng.gamma(2.0, 0.1, 200), lost=1)
    add_fleet_cell(root, 2, 1.0 + rng.gamma(2.0, 0.1, 200), lost=0)
    build_report(root)
    report = (root / "report.md").read_text()
    assert "## Fleet" in report and "*Fleet cells*" in report
    section = report.split("## Fleet", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith(f"| {first} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == len(COLUMNS)
    assert cells[1:5] == ["2", "2", "199 / 1 of 200", "not forwarded 1"]
    assert cells[6] == "11.50 / 30.25" and cells[7] == "0.85 / 41.0"
    assert cells[8] == "72.1 (60.0 .. 80.0)" and cells[9] == "12.80"
    assert cells[10] == "30.0" and cells[11] == "94.4"
    assert f"runs/{first}/devices.csv" in report and "not the broker's ceiling" in report
    pooled = next(line for line in report.splitlines() if line.startswith("| 65 | none + 2 devices | tls | 2 |"))
    assert "| 400 |" in pooled  # both repeats' 200 delays in one histogram
    summary = pd.read_csv(root / "summary.csv")
    assert set(summary["cell_id"]) >= {first, "tls-65B-none-r1"}


def test_cells_of_different_fleet_sizes_never_pool_as_repeats(tmp_path: Path) -> None:
    assert condition("none") == "none" and condition("none", "resume-id") == "none + resume-id"
    assert condition("none", devices=1000) == "none + 1000 devices"
    assert split_condition("none + 1000 devices") == ("none", "1000 devices")
    root = tmp_path / "bundle"
    make_bundle(root, scenarios=("plain", "tls"), payloads=(65,), samples=200)
    add_fleet_cell(root, 1, np.full(200, 1.5), lost=0)
    bundle = load_bundle(root)
    by_id = {c.record.cell_id: c for c in bundle.cells}
    assert by_id["tls-65B-none-r1"].group == (65, "none", "tls")
    assert by_id["tls-65B-none-2dev-r1"].group == (65, "none + 2 devices", "tls")
    assert by_id["tls-65B-none-r1"].record.devices == 1


def test_a_fleets_per_message_samples_are_per_device_and_seq() -> None:
    df = pd.DataFrame({"device": ["b", "a", "a", "b"], "seq": [0, 0, 1, 0], "delay_ms": [4.0, 1.0, 2.0, 9.0],
                       "dup": [False, False, False, True]})
    assert per_seq(df, "delay_ms").tolist() == [1.0, 2.0, 4.0]  # (a,0) (a,1) (b,0): the copy flagged dup left out
    assert per_seq(df.drop(columns="device"), "delay_ms").tolist() == [4.0, 2.0]  # one device: seq 0's first


def test_no_fleet_cell_no_fleet_section(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, scenarios=("plain", "tls"), payloads=(65,), samples=50)
    bundle = load_bundle(root)
    assert fleet_section(bundle.cells, {}) == []
    build_report(root)
    assert "## Fleet" not in (root / "report.md").read_text()


def test_a_reconnecting_fleet_gets_its_handshakes_by_kind_and_the_brokers_cpu_per_kind() -> None:
    """Issue 27: the per-kind table reads metrics.json connections and broker_cpu.<source>.per_handshake_kind."""
    from types import SimpleNamespace

    from orchestrator.report.fleet import KIND_COLUMNS, kind_rows

    per_kind = {"handshakes": {"full": {"cpu_ms_per_event": 1.7, "ci95_low": 1.5, "ci95_high": 1.9, "events": 20},
                               "resumed-ticket": {"cpu_ms_per_event": 1.1, "ci95_low": 0.9, "ci95_high": 1.3,
                                                  "events": 60}},
                "per_reading": {"cpu_ms_per_event": 0.05, "ci95_low": 0.04, "ci95_high": 0.06}, "windows": 12}
    metrics = {"connections": {"mode": "resume-ticket", "count": 80, "expected": 80, "resumed_after_first": 60,
                               "reconnections": 60},
               "broker_cpu": {"process": None, "cgroup": {"per_handshake_kind": per_kind}}}
    cell = SimpleNamespace(metrics=metrics, record=SimpleNamespace(cell_id="tls-65B-none-resume-ticket-20dev-r1"))
    persistent = SimpleNamespace(metrics={"broker_cpu": {"process": {}}}, record=SimpleNamespace(cell_id="p"))
    rows = kind_rows([(cell, {}), (persistent, {})])  # type: ignore[list-item]
    assert rows == [("tls-65B-none-resume-ticket-20dev-r1", "resume-ticket", "80 of 80", "60 of 60",
                     "1.700 (1.500 .. 1.900)", "1.100 (0.900 .. 1.300)", "50.0 (40.0 .. 60.0)", "12")]
    assert len(rows[0]) == len(KIND_COLUMNS)
