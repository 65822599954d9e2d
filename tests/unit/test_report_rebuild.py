"""`testbed report BUNDLE` re-analyses every run from its raw files; a run it cannot re-analyse fails it.

The bundle is made the way a sweep leaves it for re-analysis (runanalysis/analyse.py reads these):
runs/<cell>/cell.json with the run's 'spec', config/scenario.json, capture/capture.pcapng (here the
independent reference capture lat_plain.pcap, plaintext on 1883).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.model.layout import ANALYSIS_OUTPUTS, BundleLayout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from tests.golden.regenerate import reference_dir

RUNS = {"plain-100B-none-r1": (100, 200), "plain-65B-none-r1": (65, 100)}  # cell -> (payload, samples)
BROKEN, OTHER = "plain-65B-none-r1", "plain-100B-none-r1"


def _make_bundle(root: Path) -> Path:
    capture = reference_dir() / "lat_plain.pcap"
    if not capture.is_file():
        pytest.fail(f"reference captures not found at {reference_dir()}: set TESTBED_REFERENCE_CAPTURES")
    scenario = load_scenario("plain").model_dump(mode="json")
    for cell_id, (payload, samples) in RUNS.items():
        run = BundleLayout(root).run(cell_id)
        run.config.mkdir(parents=True)
        run.capture.parent.mkdir()
        shutil.copyfile(capture, run.capture)
        run.scenario.write_text(json.dumps(scenario), encoding="utf-8")
        spec = RunSpec(scenario="plain", payload=payload, samples=samples)
        run.cell.write_text(json.dumps({
            "cell_id": cell_id, "scenario": "plain", "payload": payload, "impairment": "none", "repeat": 1,
            "status": "ok", "error": None, "spec": spec.model_dump()}), encoding="utf-8")
    BundleLayout(root).manifest.write_text(json.dumps({
        "schema_version": 1, "created_utc": "2026-12-01T00:00:00Z", "command": ["testbed", "sweep"],
        "tool_version": "test", "git_commit": None, "seed": 1, "plan": {"baseline": "plain"},
        "environment": {}}), encoding="utf-8")
    return root


def _report(capsys: pytest.CaptureFixture[str], bundle: Path) -> tuple[int, str]:
    code = main(["report", str(bundle)])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle whose runs were all re-analysed once (so each has its previous outputs)."""
    root = _make_bundle(tmp_path_factory.mktemp("rebuild") / "bundle")
    assert main(["report", str(root)]) == 0
    return root


@pytest.fixture
def bundle(analysed: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(analysed, tmp_path / "bundle"))


def _forget_derived(bundle: Path) -> None:
    """Remove what `testbed report` must write again: the other run's outputs and the report."""
    for name in ANALYSIS_OUTPUTS:
        (BundleLayout(bundle).run(OTHER).root / name).unlink()
    BundleLayout(bundle).summary.unlink()
    BundleLayout(bundle).report_html.unlink()


def test_a_good_bundle_is_rebuilt(capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    _forget_derived(bundle)
    code, err = _report(capsys, bundle)
    assert code == 0, err
    assert all((BundleLayout(bundle).run(OTHER).root / n).is_file() for n in ANALYSIS_OUTPUTS)
    assert BundleLayout(bundle).report_html.is_file()


def test_a_run_that_cannot_be_reanalysed_fails_the_report_after_rebuilding_the_rest(
        capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    broken = BundleLayout(bundle).run(BROKEN)
    broken.capture.write_bytes(b"this is not a capture\x00\xff" * 64)
    previous = broken.metrics.read_bytes()
    _forget_derived(bundle)

    code, err = _report(capsys, bundle)

    assert code == 1, err
    lines = err.splitlines()
    assert f"error: 1 run(s) could not be re-analysed: {BROKEN}; the report was rebuilt with their previous " \
           "results" in lines
    assert any(line.startswith(f"{BROKEN}: ") and "capture.pcapng" in line for line in lines), err
    assert "internal error" not in err and "Traceback" not in err
    # everything else was rebuilt; the broken run kept its previous results
    assert all((BundleLayout(bundle).run(OTHER).root / n).is_file() for n in ANALYSIS_OUTPUTS)
    assert BundleLayout(bundle).summary.is_file() and BundleLayout(bundle).report_html.is_file()
    assert broken.metrics.read_bytes() == previous


def test_when_the_report_cannot_be_rebuilt_either_both_are_said(capsys: pytest.CaptureFixture[str],
                                                                bundle: Path) -> None:
    broken = BundleLayout(bundle).run(BROKEN)
    broken.capture.write_bytes(b"garbage")
    broken.metrics.unlink()

    code, err = _report(capsys, bundle)

    assert code == 1, err
    assert f"error: 1 run(s) could not be re-analysed: {BROKEN}; the report could not be rebuilt either" in err
    assert f"report: {broken.metrics}: missing" in err


def test_a_failed_cell_that_cannot_be_reanalysed_is_only_a_note(capsys: pytest.CaptureFixture[str],
                                                                bundle: Path) -> None:
    broken = BundleLayout(bundle).run(BROKEN)
    cell = json.loads(broken.cell.read_text(encoding="utf-8"))
    broken.cell.write_text(json.dumps(cell | {"status": "failed", "error": "broker died"}), encoding="utf-8")
    broken.capture.write_bytes(b"garbage")

    code, err = _report(capsys, bundle)

    assert code == 0, err
    assert f"{BROKEN}: analysis failed:" in err and "(a failed cell, not in the report)" in err


def test_a_run_without_raw_files_is_left_as_it_is(capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
    BundleLayout(bundle).run(BROKEN).capture.unlink()
    code, err = _report(capsys, bundle)
    assert code == 0, err
    assert f"{BROKEN}: no raw capture; left as it is" in err
