"""A run folder's analysis is a declared list of steps (runanalysis/analyse.py STEPS) run by one loop: each step
names the run-folder files it reads and writes (Layout's own attributes, so they stay real) and the metrics.json key
its result becomes, and a step added to the list reaches metrics.json with no other edit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.runanalysis import analyse
from orchestrator.runanalysis.analyse import STEPS, AnalysisStep, RunFolder, analyse_run_folder

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "analysis" / "json_t12_ecdsa_chacha"


def test_each_step_names_real_files_and_its_own_key() -> None:
    files = {name for name in dir(Layout) if not name.startswith("_")}
    for step in STEPS:
        assert set(step.reads) | set(step.writes) <= files, f"{step.name}: not a run-folder file of Layout"
        assert step.reads, f"{step.name} reads nothing"
    keys = [s.key for s in STEPS if s.key is not None]
    assert len(keys) == len(set(keys)) and len({s.name for s in STEPS}) == len(STEPS)
    assert not set(keys) & {k for s in STEPS for k in s.amends}, "a key set by one step and amended by another"


def _run_folder(root: Path) -> Layout:
    lay = Layout(root)
    lay.capture.parent.mkdir(parents=True)
    shutil.copyfile(FIXTURE / "tls_capture.pcapng", lay.capture)
    lay.keylogs.mkdir()
    for name in ("publisher", "subscriber"):
        shutil.copyfile(FIXTURE / f"{name}.keys.log", lay.keylogs / f"{name}.keys")
    lay.logs.mkdir()
    shutil.copyfile(FIXTURE / "publisher.csv", lay.publisher_log)
    shutil.copyfile(FIXTURE / "subscriber.csv", lay.subscriber_log)
    return lay


def test_a_step_added_to_the_list_reaches_metrics_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def messages(run: RunFolder) -> dict[str, int]:
        return {"messages": len(run.analysis.per_message)}

    added = (AnalysisStep("throwaway", messages, reads=("capture",), key="throwaway"),
             AnalysisStep("never", messages, reads=("capture",), key="never", when=lambda run: False))
    monkeypatch.setattr(analyse, "STEPS", (*STEPS, *added))
    lay = _run_folder(tmp_path / "run")
    scenario = load_scenario("tls").model_copy(update={"port": 18883})
    metrics = analyse_run_folder(lay.root, scenario, RunSpec(scenario="tls", payload=65, samples=40))
    written = json.loads(lay.metrics.read_text())
    assert written["throwaway"] == metrics["throwaway"] == {"messages": 40}
    assert "never" not in written
    assert list(written)[-2:] == ["resources", "throwaway"]  # after the declared steps, in the list's order
