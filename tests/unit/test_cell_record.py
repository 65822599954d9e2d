"""cell.json: one model (orchestrator/model/cell.py) written by measure/ and read by report/, versioned.

The writer is measure/cell.py's CellWriter (as a run uses it); the reader is the report's loader, through
results/cells.py. A cell.json from before the version (no schema_version) still reads; a newer one is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import TestbedError
from orchestrator.measure.cell import CellWriter
from orchestrator.model.cell import CellRecord
from orchestrator.model.layout import SCHEMA_VERSIONS, Layout
from orchestrator.model.run import RunSpec
from orchestrator.report.loader import load_bundle
from orchestrator.results.cells import cell_record_if_any, read_cell_record

BEFORE_THE_VERSION = {  # a cell.json as measure/run.py wrote it before the model (every key it could hold)
    "cell_id": "tls-65B-none-r1", "scenario": "tls", "payload": 65, "impairment": "none", "repeat": 1,
    "connection": {"asked": "persistent", "used": "persistent", "per_connection": 1, "close": "disconnect",
                   "note": None},
    "spec": {"scenario": "tls", "payload": 65, "samples": 20}, "status": "ok", "error": None,
    "started_utc": "2026-12-02T07:00:00+00:00", "timings": {"up_s": 3.2, "publish_s": 5.0},
    "exposure": {"bind": "192.0.2.1"}, "broker_nofile": 16384, "impairment_state": {"applied": False},
    "board": None, "warnings": ["analysis: late"], "hosts": [{"name": "b1", "role": "broker"}],
    "inventory": {"source": "/x/lab.yml", "copy": "inventory.yml"}, "received": 20, "publisher_exit_code": 0,
    "finished_utc": "2026-12-02T07:01:00+00:00"}


def _write(path: Path, data: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_cell_json_from_before_the_version_reads_with_every_key(tmp_path: Path) -> None:
    record = read_cell_record(_write(tmp_path / "cell.json", BEFORE_THE_VERSION))
    assert record.schema_version == SCHEMA_VERSIONS["cell"] == 2
    assert record.model_dump(exclude={"schema_version", "order", "lab", "device", "broker", "events",
                                      "images", "limited"}) == BEFORE_THE_VERSION
    # version 2's, not recorded then (a cell's --events, the images a cell ran, a fleet's loader-limited /
    # broker-limited verdicts: optional keys of version 2)
    assert record.order is None and record.lab is None and record.device is None and record.broker is None
    assert record.events is None and record.images is None and record.limited is None


def test_what_the_writer_writes_the_reader_reads_and_only_what_was_set(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "run")
    lay.root.mkdir()
    spec = RunSpec(scenario="plain", payload=70, samples=10)
    writer = CellWriter(lay, CellRecord(cell_id="plain-70B-none-r1", scenario="plain", payload=70, status="running",
                                        error=None, spec=spec.model_dump(), timings={}))
    writer.save()
    assert json.loads(lay.cell.read_text()) == {"schema_version": 2, "cell_id": "plain-70B-none-r1",
                                                "scenario": "plain", "payload": 70, "status": "running",
                                                "error": None, "spec": json.loads(json.dumps(spec.model_dump())),
                                                "timings": {}}
    writer.lap("up")
    writer.warn("first")
    writer.warn("second")
    writer.save(status="ok", received=10)
    written = json.loads(lay.cell.read_text())
    assert set(written) == {"schema_version", "cell_id", "scenario", "payload", "status", "error", "spec",
                            "timings", "warnings", "received"}  # no board, hosts, ...: never set
    assert written["warnings"] == ["first", "second"] and set(written["timings"]) == {"up_s"}
    assert read_cell_record(lay.cell) == writer.record


def test_the_model_refuses_what_no_writer_writes(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match=r"cell\.json: status"):
        read_cell_record(_write(tmp_path / "cell.json", {**BEFORE_THE_VERSION, "status": "done"}))
    with pytest.raises(TestbedError, match=r"cell\.json: surprise"):
        read_cell_record(_write(tmp_path / "cell.json", {**BEFORE_THE_VERSION, "surprise": 1}))
    record = read_cell_record(_write(tmp_path / "cell.json", BEFORE_THE_VERSION))
    with pytest.raises(ValueError):
        record.status = "done"  # type: ignore[assignment]


def test_a_newer_cell_json_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = _write(tmp_path / "cell.json", {**BEFORE_THE_VERSION, "schema_version": 3})
    with pytest.raises(TestbedError, match=r"schema_version 3 is newer than this testbed understands \(2\)"):
        read_cell_record(path)


def test_a_cell_without_a_record_is_none(tmp_path: Path) -> None:
    assert cell_record_if_any(tmp_path / "cell.json") is None


def test_the_report_reads_the_same_model(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    _write(root / "manifest.json", {"schema_version": 1, "created_utc": "2026-12-02T00:00:00Z", "command": "t",
                                    "tool_version": "test", "git_commit": None, "seed": 1, "environment": {}})
    _write(root / "runs" / "tls-65B-none-r1" / "cell.json", {**BEFORE_THE_VERSION, "status": "failed"})
    [cell] = load_bundle(root).cells
    assert isinstance(cell.record, CellRecord) and cell.record.hosts == BEFORE_THE_VERSION["hosts"]


def test_a_sites_additions_reach_metrics_json_in_its_one_write(tmp_path: Path) -> None:
    """What a run across hosts adds (the host clock, the losses before the capture) is added before metrics.json
    is written, so the file is written once (it was written, then rewritten)."""
    from orchestrator.model.scenario import load_scenario
    from orchestrator.runanalysis.analyse import analyse_run_folder
    from tests.golden.regenerate import reference_dir

    capture = reference_dir() / "lat_plain.pcap"
    if not capture.is_file():
        pytest.fail(f"reference captures not found at {reference_dir()}: set TESTBED_REFERENCE_CAPTURES")
    lay = Layout(tmp_path / "run")
    lay.capture.parent.mkdir(parents=True)
    lay.capture.write_bytes(capture.read_bytes())
    seen: list[bool] = []

    def more(metrics: dict[str, object], packets: object, at: Layout) -> None:
        seen.append(at.metrics.exists())
        metrics["site"] = {"packets": len(packets)}  # type: ignore[arg-type]

    metrics = analyse_run_folder(lay.root, load_scenario("plain"), RunSpec(scenario="plain", samples=100), more=more)
    assert seen == [False]
    assert json.loads(lay.metrics.read_text())["site"] == metrics["site"] and metrics["site"]["packets"] > 0
