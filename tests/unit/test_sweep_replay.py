"""`testbed sweep --plan BUNDLE/manifest.json` reruns a bundle's plan exactly: the same cells in the recorded order
(even where this version would order them otherwise), the same seed and options, only the host's options given
anew; anything else is refused by name before anything starts. The sweep's work is replaced (no container starts);
the run of a real rerun and `testbed compare` of the two bundles are in tests/integration/test_compare.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.cli import rebuild
from orchestrator.cli.main import main
from orchestrator.measure import sweep as sw
from orchestrator.model.sweep import SweepPlan
from orchestrator.report.rerun import reproduces_row, rerun_sentence
from orchestrator.results import manifest as bundles

RECORDED = SweepPlan(scenarios=["plain", "tls"], payloads=[65, 100], repeat=2, seed=7, samples=30, qos=[1],
                     interval_ms=40.0, publisher="esp32", serial_port="/dev/ttyUSB0", baseline="plain")


def _source(tmp_path: Path, order: list[str] | None = None) -> Path:
    """A finished bundle's manifest recording RECORDED; ``order``: the cell order it recorded."""
    bundle = tmp_path / "20260101T000000Z-study"
    bundle.mkdir()
    manifest = bundles.new_manifest(RECORDED, "study", ["testbed", "sweep"], source={"git_commit": "abc123"},
                                    environment={})
    if order is not None:
        manifest["cell_order"] = order
    bundles.save_manifest(bundle, manifest)
    return bundle


class _Sweep:
    """Stands in for the sweep's work: a new bundle with the manifest every sweep writes; records what ran."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[tuple[SweepPlan, str]] = []
        self.ran: list[list[str]] = []
        self.out = tmp_path / "out"
        monkeypatch.setattr(sw, "start_sweep", self.start)
        monkeypatch.setattr(sw, "run_sweep", self.run)
        monkeypatch.setattr(sw, "check_finished", lambda job: None)
        monkeypatch.setattr(rebuild, "build_derived", lambda bundle, baseline=None, grading=(): [])

    def start(self, plan: SweepPlan, out_root: Path, name: str, command: list[str]) -> sw.SweepJob:
        self.started.append((plan, name))
        bundle = bundles.new_bundle_dir(out_root, name)
        bundle.mkdir(parents=True)
        bundles.save_manifest(bundle, bundles.new_manifest(plan, name, command, source={}, environment={}))
        return sw.SweepJob(bundle, plan, plan.cells())

    def run(self, job: sw.SweepJob, progress: Any) -> sw.SweepResult:
        self.ran.append([c.cell_id for c in job.cells])
        return sw.SweepResult(job.bundle)

    def new_manifest(self) -> dict[str, Any]:
        [bundle] = [p for p in self.out.iterdir() if p.is_dir()]
        return json.loads((bundle / "manifest.json").read_text())


def test_the_rerun_runs_the_recorded_cells_in_the_recorded_order_with_this_hosts_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    order = [c.cell_id for c in RECORDED.cells()][::-1]  # as a version that ordered cells otherwise recorded them
    source = _source(tmp_path, order)
    calls = _Sweep(tmp_path, monkeypatch)

    code = main(["sweep", "--plan", str(source / "manifest.json"), "--serial-port", "/dev/ttyACM1",
                 "--out", str(calls.out)])

    assert code == 0, capsys.readouterr()
    [(plan, name)] = calls.started
    assert plan == RECORDED.model_copy(update={"serial_port": "/dev/ttyACM1"}) and name == "study"
    assert calls.ran == [order] and len(order) == 8
    manifest = calls.new_manifest()
    assert manifest["cell_order"] == order and manifest["seed"] == 7
    assert manifest["reproduces"] == {
        "bundle": str(source.resolve()), "name": source.name, "created_utc": bundles.load_manifest(source)[
            "created_utc"], "tool_version": manifest["tool_version"], "git_commit": "abc123",
        "host_options": {"serial_port": {"recorded": "/dev/ttyUSB0", "now": "/dev/ttyACM1"}}}
    said = capsys.readouterr().err
    assert f"reproducing {source.name}" in said and "8 cells in its recorded order, seed 7" in said
    assert "serial-port /dev/ttyUSB0 -> /dev/ttyACM1" in said


def test_a_bundle_folder_is_taken_too_and_the_rerun_keeps_the_recorded_plan_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _source(tmp_path)
    calls = _Sweep(tmp_path, monkeypatch)
    assert main(["sweep", "--plan", str(source), "--name", "again", "--out", str(calls.out)]) == 0
    assert calls.started == [(RECORDED, "again")]
    assert calls.ran == [[c.cell_id for c in RECORDED.cells()]]
    assert calls.new_manifest()["reproduces"]["host_options"] == {}


@pytest.mark.parametrize(("extra", "named"), [
    (["--payloads", "65"], "--payloads"),
    (["--scenarios", "plain,tls"], "--scenarios"),  # the recorded value, given: still refused (given, not changed)
    (["--samples", "10", "--seed", "7"], "--samples, --seed"),
    (["--publisher", "virtual"], "--publisher"),
])
def test_any_option_but_the_hosts_is_refused_by_name_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], extra: list[str],
        named: str) -> None:
    source = _source(tmp_path)
    calls = _Sweep(tmp_path, monkeypatch)
    code = main(["sweep", "--plan", str(source / "manifest.json"), *extra, "--out", str(calls.out)])
    err = capsys.readouterr().err
    assert code == 1 and calls.started == [] and not calls.out.exists()
    assert f"error: --plan reruns the recorded plan exactly: {named} cannot be given with it" in err
    assert "--serial-port, --baud, --board-host, --reset-board, --inventory" in err and "Traceback" not in err


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    return line


def test_bad_plans_are_one_line_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    calls = _Sweep(tmp_path, monkeypatch)
    source = _source(tmp_path)
    assert "--plan and --resume cannot go together" in _refused(
        ["sweep", "--plan", str(source), "--resume", str(source)], capsys)
    assert "manifest.json: missing" in _refused(["sweep", "--plan", str(tmp_path)], capsys)
    other = tmp_path / "plan.yaml"
    other.write_text("scenarios: [tls]\n")
    assert "not a bundle's manifest.json nor a bundle folder" in _refused(["sweep", "--plan", str(other)], capsys)
    manifest = bundles.load_manifest(source)
    manifest["plan"]["payloads"] = [65, "many"]
    bundles.save_manifest(source, manifest)
    assert "payloads" in _refused(["sweep", "--plan", str(source)], capsys)
    assert calls.started == []


def test_a_plan_whose_cells_this_version_names_otherwise_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = _Sweep(tmp_path, monkeypatch)
    ids = [c.cell_id for c in RECORDED.cells()]
    source = _source(tmp_path, [*ids[1:], "tls-65B-none-q1-r1"])
    line = _refused(["sweep", "--plan", str(source)], capsys)
    assert f"recorded only: tls-65B-none-q1-r1; made only now: {ids[0]}" in line and calls.started == []


def test_the_report_and_compare_say_which_bundle_is_reproduced(tmp_path: Path) -> None:
    source = {"name": "20260101T000000Z-study", "created_utc": "2026-01-01T00:00:00+00:00", "tool_version": "0.9",
              "host_options": {"serial_port": {"recorded": "/dev/ttyUSB0", "now": "/dev/ttyACM1"}}}
    [(key, text)] = reproduces_row({"reproduces": source})
    assert key == "reproduces" and text.startswith("20260101T000000Z-study (created 2026-01-01T00:00:00+00:00")
    assert "serial_port /dev/ttyUSB0 -> /dev/ttyACM1" in text and reproduces_row({}) == []
    old = SimpleNamespace(root=tmp_path / "20260101T000000Z-study", manifest={})
    new = SimpleNamespace(root=tmp_path / "20260102T000000Z-study", manifest={"reproduces": source})
    assert rerun_sentence(old, new).startswith(" B reproduces A: A's plan rerun by testbed sweep --plan")
    assert rerun_sentence(new, old).startswith(" A reproduces B")
    assert rerun_sentence(old, old) == ""
