"""A sweep runs its plan block by block (orchestrator/measure/sweep.py run_cells): one kept-up lab per block, taken
down after its last cell and after a cell that failed (the next cell brings a fresh one up); each cell's order and
lab recorded; where the plan, the variant, the site or an impairment says so, a fresh lab per cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.measure import sweep as sw
from orchestrator.measure.run import RunOutcome
from orchestrator.model.sweep import SweepPlan
from orchestrator.report.order import run_order
from orchestrator.results import manifest as bundles


class FakeLab:
    made: list[FakeLab] = []
    waits_before_publish = True

    def __init__(self, blocks: Path, before_publish: Any = lambda: None) -> None:
        self.blocks, self.downs, self.cells = blocks, 0, []
        self.before_publish = before_publish if self.waits_before_publish else (lambda: None)
        FakeLab.made.append(self)

    def down(self, evidence_too: object = None) -> None:
        self.downs += 1


class Progress:
    def cell_started(self, index: int, total: int, cell: Any, expected_s: float) -> None: ...
    def messages(self, received: int, expected: int) -> None: ...
    def cell_finished(self, cell: Any, status: str, error: str | None) -> None: ...
    def note(self, message: str) -> None: ...


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: SweepPlan,
         failing: tuple[str, ...] = ()) -> list[tuple[str, Any, dict[str, Any]]]:
    FakeLab.made = []
    ran: list[tuple[str, Any, dict[str, Any]]] = []

    def execute_run(spec: Any, run_dir: Path, *, cell: dict[str, Any], lab: Any, **_: Any) -> RunOutcome:
        ran.append((cell["cell_id"], lab, cell))
        if lab is not None:
            lab.cells.append(cell["cell_id"])
        return RunOutcome(run_dir, "failed" if cell["cell_id"] in failing else "ok", 0, None, None)

    monkeypatch.setattr(sw, "execute_run", execute_run)
    monkeypatch.setattr(sw, "KeptLab", FakeLab)
    bundle = tmp_path / "b"
    bundle.mkdir()
    bundles.save_manifest(bundle, bundles.new_manifest(plan, "t", ["testbed"], source={}, environment={}))
    result = sw.run_cells(bundle, plan, plan.cells(), Progress())
    assert set(result.statuses) == {c.cell_id for c in plan.cells()}
    entries = bundles.load_manifest(bundle)["cells"]
    assert [entries[c.cell_id]["status"] for c in plan.cells()] == [result.statuses[c.cell_id] for c in plan.cells()]
    return ran


def test_each_block_keeps_one_lab_up_and_every_cell_says_where_it_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = SweepPlan(scenarios=["plain", "tls"], payloads=[65, 100, 200], samples=5, seed=4)
    ran = _run(tmp_path, monkeypatch, plan)
    assert [cell_id for cell_id, _, _ in ran] == [c.cell_id for c in plan.cells()]
    assert len(FakeLab.made) == 2 and all(lab.downs == 1 for lab in FakeLab.made)
    assert [lab.cells for lab in FakeLab.made] == [[c.cell_id for c in b] for b in plan.blocks()]
    orders = [cell["order"] for _, _, cell in ran]
    assert [o["position"] for o in orders] == list(range(1, 7)) and {o["of"] for o in orders} == {6}
    assert [(o["block"], o["in_block"], o["block_size"]) for o in orders] == [
        (1, 1, 3), (1, 2, 3), (1, 3, 3), (2, 1, 3), (2, 2, 3), (2, 3, 3)]
    assert {cell["lab"]["mode"] for _, _, cell in ran} == {"kept-up"} and orders[0]["mode"] == "blocked"


def test_a_failed_cell_takes_its_blocks_lab_down_before_the_next_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = SweepPlan(scenarios=["tls"], payloads=[65, 100, 200], samples=5)
    first = plan.cells()[0].cell_id
    ran = _run(tmp_path, monkeypatch, plan, failing=(first,))
    [lab] = FakeLab.made
    assert lab.downs == 2  # after the failed cell, and at the block's end (a no-op for a lab already down)
    assert [cell_id for cell_id, _, _ in ran][0] == first and all(got is lab for _, got, _ in ran)


@pytest.mark.parametrize("fields,why", [
    ({"fresh_lab_per_cell": True}, "--fresh-lab-per-cell"),
    ({"impairments": ["wifi-good"]}, "an impaired cell sets its delay line up with a lab of its own"),
    ({"publisher": "esp32", "serial_port": "/dev/null"}, "a board's cell brings a fresh lab up"),
])
def test_a_fresh_lab_per_cell_where_the_plan_the_variant_or_an_impairment_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], why: str) -> None:
    plan = SweepPlan(scenarios=["tls"], payloads=[65, 100], samples=5, **fields)
    ran = _run(tmp_path, monkeypatch, plan)
    assert FakeLab.made == [] and all(lab is None for _, lab, _ in ran)
    assert all(cell["lab"]["mode"] == "fresh-per-cell" and cell["lab"]["why"].startswith(why) for _, _, cell in ran)


def test_the_report_states_the_order_and_how_the_labs_were_kept() -> None:
    plan = SweepPlan(scenarios=["plain", "tls"], payloads=[65, 100], seed=9)
    assert run_order(plan.order_record()) == ("blocked, seed 9: 2 block(s) of 2 cell(s), the lab kept up within a "
                                              "block (each cell's cell.json says what it reused)")
    fresh = SweepPlan(scenarios=["plain", "tls"], payloads=[65, 100], order="random", fresh_lab_per_cell=True)
    assert run_order(fresh.order_record()).endswith("a fresh lab per cell")
    assert run_order(None) == "not recorded (a bundle from before the blocked order)"


class Events(Progress):
    """What a sweep told, in order, with the thread that did each cell's analysis."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def cell_started(self, index: int, total: int, cell: Any, expected_s: float) -> None:
        self.seen.append(f"start {cell.cell_id}")

    def cell_finished(self, cell: Any, status: str, error: str | None) -> None:
        self.seen.append(f"{status} {cell.cell_id}" + (f": {error}" if error else ""))


def _run_analysed_beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: SweepPlan, events: Events,
                         analysis: Any, interrupt_at: str | None = None) -> Any:
    """run_cells with an execute_run that measures (the publisher goes once the lab's before_publish returned) and
    hands its analysis back, as measure/run.py does with analyse_later."""
    FakeLab.made = []

    def execute_run(spec: Any, run_dir: Path, *, cell: dict[str, Any], lab: Any, analyse_later: bool,
                    **_: Any) -> RunOutcome:
        assert analyse_later is (lab is not None)
        lab.before_publish()
        events.seen.append(f"publish {cell['cell_id']}")
        if cell["cell_id"] == interrupt_at:
            raise KeyboardInterrupt("SIGINT")
        return RunOutcome(run_dir, "ok", 5, None, None,
                          analysis=lambda: analysis(cell["cell_id"], RunOutcome(run_dir, "ok", 5, None, {})))

    monkeypatch.setattr(sw, "execute_run", execute_run)
    monkeypatch.setattr(sw, "KeptLab", FakeLab)
    bundle = tmp_path / "b"
    bundle.mkdir()
    bundles.save_manifest(bundle, bundles.new_manifest(plan, "t", ["testbed"], source={}, environment={}))
    return bundle, lambda: sw.run_cells(bundle, plan, plan.cells(), events)


def test_a_kept_up_cell_is_analysed_beside_the_next_cells_setup_and_ended_before_its_publisher_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    plan = SweepPlan(scenarios=["plain", "tls"], payloads=[65, 100], samples=5, seed=3)
    events, threads = Events(), set()

    def analysis(cell_id: str, outcome: RunOutcome) -> RunOutcome:
        threads.add(threading.current_thread().name)
        events.seen.append(f"analysed {cell_id}")
        return outcome

    bundle, run = _run_analysed_beside(tmp_path, monkeypatch, plan, events, analysis)
    result = run()
    ids = [c.cell_id for c in plan.cells()]
    at = events.seen.index
    for before, cell_id in zip(ids, ids[1:], strict=False):  # ended once the next started, before it publishes
        assert at(f"publish {before}") < at(f"analysed {before}") < at(f"ok {before}") < at(f"publish {cell_id}")
        assert at(f"start {cell_id}") < at(f"ok {before}")
    assert events.seen[-2:] == [f"analysed {ids[-1]}", f"ok {ids[-1]}"] and len(events.seen) == 4 * len(ids)
    assert threads == {"cell-analysis"}
    assert result.statuses == dict.fromkeys(ids, "ok")
    assert {e["status"] for e in bundles.load_manifest(bundle)["cells"].values()} == {"ok"}


def test_a_failed_analysis_beside_fails_its_cell_only_and_keeps_the_lab_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.errors import TestbedError

    plan = SweepPlan(scenarios=["tls"], payloads=[65, 100, 200], samples=5, seed=3)
    first = plan.cells()[0].cell_id
    events = Events()

    def analysis(cell_id: str, outcome: RunOutcome) -> RunOutcome:
        if cell_id == first:
            raise TestbedError("the record cannot be saved: disk full")
        return outcome

    bundle, run = _run_analysed_beside(tmp_path, monkeypatch, plan, events, analysis)
    result = run()
    assert result.statuses[first] == "failed"
    assert f"failed {first}: the record cannot be saved: disk full" in events.seen
    assert [s for c, s in result.statuses.items() if c != first] == ["ok", "ok"]
    [lab] = FakeLab.made
    assert lab.downs == 1  # its block's end only: the measurement was fine
    assert bundles.load_manifest(bundle)["cells"][first]["error"] == "the record cannot be saved: disk full"


def test_ctrl_c_during_the_next_cell_still_ends_the_cell_whose_analysis_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    plan = SweepPlan(scenarios=["tls"], payloads=[65, 100, 200], samples=5, seed=3)
    ids = [c.cell_id for c in plan.cells()]
    events = Events()

    def analysis(cell_id: str, outcome: RunOutcome) -> RunOutcome:
        time.sleep(0.3)  # still running when the next cell is interrupted
        return outcome

    monkeypatch.setattr(FakeLab, "waits_before_publish", False)  # interrupted before its publisher would go
    bundle, run = _run_analysed_beside(tmp_path, monkeypatch, plan, events, analysis, interrupt_at=ids[1])
    with pytest.raises(KeyboardInterrupt):
        run()
    entries = bundles.load_manifest(bundle)["cells"]
    assert entries[ids[0]]["status"] == "ok" and entries[ids[1]]["status"] == "interrupted"
    assert ids[2] not in entries
    # the interrupted cell is ended first, then the one whose analysis was running: nothing of it is lost
    assert events.seen[-2:] == [f"interrupted {ids[1]}: interrupted by the user (SIGINT)", f"ok {ids[0]}"]
