"""A sweep job run with its progress bar and its report derived and named: `testbed sweep` and `testbed demo`."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli.console import escape, out
from orchestrator.measure.sweep import SweepJob
from orchestrator.model.layout import BundleLayout


def sweep_and_report(job: SweepJob, grading: list[Path]) -> None:
    """Run a sweep job's cells with a progress bar, derive its report, print the summary and the report's path
    (`testbed sweep` and `testbed demo`); a sweep with failed cells then fails."""
    from orchestrator.cli import rebuild
    from orchestrator.cli.render import RichSweepProgress, sweep_bar, sweep_summary
    from orchestrator.measure import sweep as sw

    with sweep_bar() as bar:
        sw.run_sweep(job, RichSweepProgress(bar, len(job.cells)))
    derived = rebuild.build_derived(job.bundle, baseline=job.plan.baseline, grading=grading)
    out.print(sweep_summary(job.bundle))
    out.print(f"bundle: {escape(str(job.bundle))}")
    out.print(f"report: {escape(str(BundleLayout(job.bundle).report_html))}  ({len(derived)} derived files)")
    sw.check_finished(job)
