"""A bundle's derived files: the report after a sweep, and for `testbed report` every run re-analysed first.

Here, in the cli layer, because it joins two layers that must not import each other's way: measure/ re-analyses
the run folders (it runs tshark) and report/ builds the report from them (it reaches no backend).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.errors import TestbedError
from orchestrator.measure.sweep import check_grading, raise_not_reanalysed, reanalyse_runs
from orchestrator.report.build import build_report
from orchestrator.results import manifest as bundles


def build_derived(bundle: Path, baseline: str | None = None, grading: Sequence[Path] = ()) -> list[Path]:
    return build_report(bundle, baseline=baseline, grading_tables=list(grading))


def rebuild_bundle(bundle: Path, baseline: str | None = None, grading: Sequence[Path] = (),
                   progress: Callable[[str], None] = lambda _m: None) -> list[Path]:
    """Re-analyse every run from its raw files (capture, logs, key logs), then rebuild the report.

    A run that finished ok and cannot be re-analysed keeps its previous outputs; every other run and
    the report are still rebuilt, then a TestbedError names the runs that could not be.
    """
    manifest = bundles.load_manifest(bundle)
    check_grading(grading)
    written, failed = reanalyse_runs(bundle, progress)
    report_error = None
    try:
        written += build_derived(bundle, baseline=baseline or manifest.get("plan", {}).get("baseline"),
                                 grading=grading)
    except TestbedError as exc:
        if not failed:
            raise
        report_error = exc.message
    if failed:
        raise_not_reanalysed(failed, report_error)
    return written
