"""`testbed sweep`: the study's matrix into one results bundle, unattended and resumable.

The plan is validated completely before anything starts; the cells run in the plan's order (blocked by lab
configuration by default, orchestrator/model/sweep.py); within a block the lab is kept up (lab/keptlab.py),
every cell gets a fresh broker process and fresh clients, and a cell's analysis runs while the next cell's lab gets
ready, ending before that cell publishes (measure/overlap.py; with --fresh-lab-per-cell, or where the variant, the
site or an impairment says why not, the whole lab is new per cell and analysed before the next); a failed cell
is recorded with its logs, takes its block's lab down (the next cell brings a fresh one up) and the sweep goes on;
Ctrl-C (or SIGTERM) tears the current cell and its lab down, marks it interrupted, keeps every finished cell (one
being analysed is waited for) and prints the `--resume` command that runs exactly the missing cells. While a
sweep runs, its bundle is locked (results/bundle_lock.py): a `--resume` of it is refused, naming the sweep.
`testbed report` re-analyses every run from its raw files (reanalyse_runs) and rebuilds the report
(orchestrator/cli/rebuild.py); a run that cannot be re-analysed makes it fail, naming the run, after rebuilding
everything else.

"Validated completely": every distinct cell of the plan against every rule, in one refusal naming each impossible
cell (validate_plan, orchestrator/model/plancheck.py), and the site's and the publisher's checks once per lab
configuration (preflight_plan); on --resume and --plan too.
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator.analysis.grading import load_table
from orchestrator.environment.record import git_commit
from orchestrator.errors import TestbedError
from orchestrator.lab.keptlab import KeptLab
from orchestrator.measure.overlap import AnalysisBeside
from orchestrator.measure.run import RunOutcome, execute_run, preflight
from orchestrator.measure.site import site_for
from orchestrator.model.impairment import load_impairment
from orchestrator.model.layout import ANALYSIS_OUTPUTS, BundleLayout, Layout
from orchestrator.model.plancheck import canonical_cells, check_cells
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.model.sweep import Cell, SweepPlan
from orchestrator.model.yamlfile import user_input
from orchestrator.publishers.board.publisher import LINKS as BOARDS
from orchestrator.publishers.variants import variant_for
from orchestrator.results import bundle_lock
from orchestrator.results import manifest as bundles
from orchestrator.results.atomic import read_json
from orchestrator.results.cells import cell_record_if_any
from orchestrator.results.space import check_cell_space
from orchestrator.runanalysis.analyse import analyse_run_folder
from orchestrator.signals import interrupted_by


class SweepProgress(Protocol):
    def cell_started(self, index: int, total: int, cell: Cell, expected_s: float) -> None: ...
    def messages(self, received: int, expected: int) -> None: ...
    def cell_finished(self, cell: Cell, status: str, error: str | None) -> None: ...
    def note(self, message: str) -> None: ...


@dataclass
class SweepResult:
    bundle: Path
    statuses: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepJob:
    """A bundle and the cells of its plan still to run."""

    bundle: Path
    plan: SweepPlan
    cells: list[Cell]


def validate_plan(plan: SweepPlan) -> None:
    """Everything about the plan that can be refused before a container starts: every distinct cell against every
    rule (one refusal naming each impossible cell and its rule, orchestrator/model/plancheck.py), the baseline,
    each profile at the site."""
    check_cells(plan)
    if plan.baseline not in plan.scenarios:
        raise TestbedError(f"baseline scenario {plan.baseline!r} is not in --scenarios "
                           f"({', '.join(plan.scenarios)})", hint="add it or choose --baseline")
    site = site_for(plan.inventory)
    for name in plan.impairments:
        site.check_profile(name, plan.delay_mechanism)


def preflight_plan(plan: SweepPlan) -> None:
    """The site's and the publisher's checks of a run (measure/run.py preflight: the tools and images, the profile at
    the site with the mechanism the publisher uses, a fleet's size) for each distinct lab configuration of the plan
    (scenario, profile, fleet size: what they read that differs between cells; the rules were checked per cell)."""
    seen: set[tuple[Any, ...]] = set()
    for cell in canonical_cells(plan):
        key = plan.lab_key(cell)[:-1]  # but the repeat
        if key not in seen:
            seen.add(key)
            spec_ = plan.run_spec(cell)
            preflight(load_scenario(spec_.scenario), spec_)


def check_grading(tables: Sequence[Path]) -> None:
    """Read the user's grading tables now, so a bad file is refused before any cell runs."""
    for path in tables:
        load_table(path)


def start_sweep(plan: SweepPlan, out_root: Path, name: str, command: list[str]) -> SweepJob:
    """Validate ``plan`` and the machine, then make the bundle with its manifest under ``out_root``."""
    validate_plan(plan)
    preflight_plan(plan)
    bundles.check_writable(out_root)
    bundle = bundles.make_bundle_dir(out_root, name)  # a name taken in this second is refused by name
    bundle_lock.hold(bundle)
    site = site_for(plan.inventory)
    manifest = bundles.new_manifest(plan, name, command, source=git_commit(), environment=site.environment())
    bundles.save_manifest(bundle, {**manifest, **site.manifest(plan, bundle), "order": plan.order_record()})
    return SweepJob(bundle, plan, plan.cells())


def resume_sweep(bundle: Path) -> SweepJob:
    """The plan recorded in ``bundle`` and exactly its cells not finished ok."""
    manifest = bundles.load_manifest(bundle)
    plan = bundles.plan_of(manifest, bundle)
    validate_plan(plan)  # read-only: an impossible plan leaves the bundle as it was, lock file included
    preflight_plan(plan)
    bundle_lock.hold(bundle)  # refused while another sweep writes it
    bundles.check_writable(bundle)
    return SweepJob(bundle, plan, bundles.missing_cells(bundle, plan))


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (e.g. `docker stop`, a CI timeout) tears the current cell down like Ctrl-C does."""
    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_sweep(sweep: SweepJob, progress: SweepProgress) -> SweepResult:
    """Run the sweep's cells; an interruption keeps every finished cell and says how to resume."""
    try:
        with _sigterm_as_interrupt():
            return run_cells(sweep.bundle, sweep.plan, sweep.cells, progress)
    except KeyboardInterrupt:
        raise TestbedError(f"sweep interrupted; finished cells are intact in {sweep.bundle}",
                           hint=f"resume with: testbed sweep --resume {sweep.bundle}", exit_code=130) from None
    finally:
        BOARDS.close()  # a board's serial port is opened once per sweep
        bundle_lock.release_bundle(sweep.bundle)


def check_finished(sweep: SweepJob) -> None:
    """TestbedError naming the cells of the plan that ran and did not finish ok."""
    failed = [c.cell_id for c in bundles.failed_cells(sweep.bundle, sweep.plan)]
    if failed:
        raise TestbedError(f"{len(failed)} cell(s) failed: {', '.join(failed)} (logs in their run folders)",
                           hint=f"rerun them with: testbed sweep --resume {sweep.bundle}")


def run_cells(bundle: Path, plan: SweepPlan, cells: list[Cell], progress: SweepProgress) -> SweepResult:
    """``cells`` block by block: a block's kept-up lab is taken down after its last cell, after a cell that did not
    finish ok (the next one brings a fresh lab up), and on Ctrl-C."""
    result = SweepResult(bundle)
    placed = placement(plan)
    index = 0
    beside = AnalysisBeside()  # a kept-up lab's cell is analysed while the next cell's lab gets ready
    try:
        for block in plan.blocks(cells):
            why = fresh_lab_reason(plan, plan.run_spec(block[0]))
            if why:
                beside.settle()
            lab = None if why else KeptLab(BundleLayout(bundle).blocks, before_publish=beside.settle)
            try:
                for cell in block:
                    index += 1
                    lab_record = {"mode": "fresh-per-cell", "why": why} if why else {"mode": "kept-up"}
                    status = _run_cell(bundle, plan, cell, (index, len(cells)), {"order": placed.get(cell.cell_id),
                                                                                "lab": lab_record}, lab, progress,
                                       result, beside)
                    if status != "ok" and lab is not None:
                        lab.down()
            except BaseException:
                if lab is not None:  # its teardown's own failure (a full disk has no room for its logs) hides not why
                    with suppress(TestbedError):
                        lab.down()
                raise
            if lab is not None:
                lab.down()
    except BaseException:
        with suppress(Exception):  # the finished measurement is analysed and recorded all the same
            beside.settle()
        raise
    beside.settle()
    return result


def fresh_lab_reason(plan: SweepPlan, spec_: RunSpec) -> str | None:
    """Why a block's cells each bring the whole lab up (None: the block keeps one lab up)."""
    if plan.fresh_lab_per_cell:
        return "--fresh-lab-per-cell"
    why = site_for(spec_.inventory).fresh_lab_reason or variant_for(spec_).fresh_lab_reason
    if why is None and not load_impairment(spec_.impairment).is_noop:
        why = "an impaired cell sets its delay line up with a lab of its own"
    return why


def placement(plan: SweepPlan) -> dict[str, dict[str, Any]]:
    """Every cell's place in the plan's order (cell.json's and the manifest's ``order``)."""
    blocks = plan.blocks()
    total = sum(len(b) for b in blocks)
    out: dict[str, dict[str, Any]] = {}
    for b, block in enumerate(blocks, start=1):
        for k, cell in enumerate(block, start=1):
            out[cell.cell_id] = {"mode": plan.order, "seed": plan.seed, "position": len(out) + 1, "of": total,
                                 "block": b, "blocks": len(blocks), "in_block": k, "block_size": len(block)}
    return out


def _run_cell(bundle: Path, plan: SweepPlan, cell: Cell, at: tuple[int, int], record: dict[str, Any],
              lab: KeptLab | None, progress: SweepProgress, result: SweepResult, beside: AnalysisBeside) -> str:
    """Run one cell; the status of its measurement. In a kept-up lab its analysis goes on beside the next cell
    (``beside``), which ends the cell (manifest, progress, ``result``) once it is done; else it is ended here."""
    run_dir = BundleLayout(bundle).run(cell.cell_id).root
    if run_dir.exists():  # an interrupted or failed earlier attempt: start the cell afresh
        shutil.rmtree(run_dir)
    spec_ = plan.run_spec(cell)
    check_cell_space(bundle, spec_, cell.cell_id)  # a cell that would not fit is refused by name, with --resume
    progress.cell_started(*at, cell, spec_.expected_duration_s)
    entry: dict[str, Any] = {"started_utc": _now()}

    def end(status: str, error: str | None) -> None:
        result.statuses[cell.cell_id] = status
        _end_cell(bundle, cell, run_dir, entry, status, error, progress)

    status, error, ended = "failed", None, True
    try:
        outcome = execute_run(spec_, run_dir, cell={"cell_id": cell.cell_id, "repeat": cell.repeat,
                                                     "scenario": cell.scenario, "payload": cell.payload,
                                                     "impairment": cell.impairment, **record},
                              progress=progress.messages, status=progress.note, lab=lab,
                              analyse_later=lab is not None)
        status, error = outcome.status, outcome.error
        if outcome.analysis is not None:
            beside.start(outcome.analysis, lambda done, exc: end(*_analysed(done, exc)))
            ended = False
    except KeyboardInterrupt as exc:
        status, error = "interrupted", interrupted_by(exc)
        raise
    except TestbedError as exc:
        status, error = "failed", exc.message
    finally:
        if ended:
            end(status, error)
    return status


def _analysed(outcome: RunOutcome | None, error: BaseException | None) -> tuple[str, str | None]:
    """A cell's status and error once its analysis ran (``error``: what the analysis or the record's save raised)."""
    if outcome is not None:
        return outcome.status, outcome.error
    return "failed", error.message if isinstance(error, TestbedError) else f"analysis: {error!r}"


def _end_cell(bundle: Path, cell: Cell, run_dir: Path, entry: dict[str, Any], status: str, error: str | None,
              progress: SweepProgress) -> None:
    """The cell's manifest entry (its status and the banners its record holds), and its progress line."""
    entry.update(status=status, error=error, finished_utc=_now())
    recorded = cell_record_if_any(Layout(run_dir).cell)
    for key in ("order", "lab", "impairment_state", "board", "device", "connection", "hosts", "images"):  # banners
        if recorded is not None and getattr(recorded, key):
            entry[key] = getattr(recorded, key)
    try:
        _record_cell(bundle, cell, entry)
    except TestbedError as exc:  # a full disk: an interrupt is still what happened (exit 130, the resume hint)
        if status != "interrupted":
            raise
        progress.note(f"{cell.cell_id}: not recorded in the manifest: {exc.message}")
    finally:  # told also when the manifest cannot take it: the user learns which cell and why
        progress.cell_finished(cell, status, error)


def _record_cell(bundle: Path, cell: Cell, entry: dict[str, Any]) -> None:
    manifest = bundles.load_manifest(bundle)
    manifest.setdefault("cells", {})[cell.cell_id] = entry
    bundles.save_manifest(bundle, manifest)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _reanalyse(run_dir: Path, progress: Callable[[str], None]) -> list[Path]:
    """Re-analyse one run folder from its raw files; the files written (none when it has no raw data).

    TestbedError when a run that finished ok cannot be re-analysed; for a failed or interrupted run
    (left out of the report anyway) the problem is only a progress note, as it was when it ran.
    """
    lay = Layout(run_dir)
    cell, scenario_data = cell_record_if_any(lay.cell), read_json(lay.scenario)
    if cell is None or not cell.spec or not scenario_data or not lay.capture.exists():
        progress(f"{run_dir.name}: no raw capture; left as it is")
        return []
    progress(f"{run_dir.name}: re-analysing the capture")
    try:
        with user_input(f"run recorded in {run_dir.name}"):
            scenario, spec_ = Scenario.model_validate(scenario_data), RunSpec.model_validate(cell.spec)
        analyse_run_folder(run_dir, scenario, spec_, more=site_for(spec_.inventory).more_metrics)
    except TestbedError as exc:
        if cell.status == "ok":
            raise
        progress(f"{run_dir.name}: analysis failed: {exc.message} (a {cell.status} cell, not in the report)")
        return []
    return [run_dir / name for name in ANALYSIS_OUTPUTS]


def reanalyse_runs(bundle: Path, progress: Callable[[str], None]) -> tuple[list[Path], dict[str, str]]:
    """Re-analyse every run folder of ``bundle``: the files written, and the runs that could not be (their
    previous outputs kept) with the reason."""
    written: list[Path] = []
    failed: dict[str, str] = {}
    for run_dir in BundleLayout(bundle).run_folders():
        try:
            written += _reanalyse(run_dir, progress)
        except TestbedError as exc:
            progress(f"{run_dir.name}: analysis failed: {exc.message}")
            failed[run_dir.name] = exc.message
    return written, failed


def raise_not_reanalysed(failed: dict[str, str], report_error: str | None) -> None:
    evidence = [f"{name}: {message}" for name, message in failed.items()]
    if report_error is None:
        rebuilt = "the report was rebuilt with their previous results"
    else:
        rebuilt = "the report could not be rebuilt either"
        evidence.append(f"report: {report_error}")
    raise TestbedError(f"{len(failed)} run(s) could not be re-analysed: {', '.join(failed)}; {rebuilt}",
                       evidence="\n".join(evidence))
