"""build_report: rebuild every derived file of a bundle from runs/*/ and manifest.json alone.

Derived files: summary.csv, comparisons.csv, plots/*.png, report.md, report.html. Each is
written atomically; the same input gives byte-identical output (no clock, no random state
other than the recorded bootstrap seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.analysis import stats
from orchestrator.model.axes import AXES, AxisTable
from orchestrator.model.layout import BundleLayout
from orchestrator.report import claims, handshake_split, lifecycle, sections
from orchestrator.report.board import board_section
from orchestrator.report.document import Block, Bullets, Figure, Heading, render_html, render_markdown
from orchestrator.report.energy import energy_section
from orchestrator.report.events import events_figures, events_section
from orchestrator.report.exchanges import exchanges_section
from orchestrator.report.figures import make_figures
from orchestrator.report.fleet import fleet_section
from orchestrator.report.headline import headline_section
from orchestrator.report.impairment import impairment_section
from orchestrator.report.loader import Bundle, load_bundle
from orchestrator.report.options import ReportOptions, report_options
from orchestrator.report.order import cell_sort_key, groups, scenario_order
from orchestrator.report.stacks import stacks_section
from orchestrator.report.study import load_study, study_rows, tls_scenarios_in
from orchestrator.report.tables import COMPARISON_COLUMNS, comparison_rows, summary_columns, summary_row
from orchestrator.report.values import Row, to_csv
from orchestrator.results.atomic import write_bytes_atomic, write_text_atomic


def _title(bundle: Bundle) -> str:
    return f"MQTT over TLS vs plaintext: {bundle.root.name}"


def build_document(
    bundle: Bundle,
    options: ReportOptions,
    comparisons: Sequence[Row],
    figures: Sequence[Figure],
    study: Sequence[Row],
    order: Sequence[str],
) -> list[Block]:
    """The report as blocks, section by section."""
    all_cells = sorted(bundle.cells, key=cell_sort_key(order))
    ok = [c for c in all_cells if c.ok]
    return [
        Heading(1, _title(bundle)),
        *headline_section(comparisons, groups(ok), ok, options.baseline, load_study()),
        Heading(2, "This bundle"),
        sections.header(bundle, options, len(ok)),
        Heading(2, "What the numbers mean"),
        Bullets(tuple(sections.explanations(bundle))),
        *sections.cells_section(bundle, all_cells, options),
        *claims.warnings_section(bundle, all_cells),
        *impairment_section(all_cells),
        *board_section(all_cells),
        *lifecycle.lifecycle_section(all_cells, groups(ok)),
        *energy_section(all_cells, groups(ok)),
        *handshake_split.split_section(ok),
        *exchanges_section(ok),
        *stacks_section(ok),
        *fleet_section(all_cells, groups(ok)),
        *events_section(ok),
        *sections.comparisons_section(comparisons, ok, options.baseline),
        *sections.grades_section(ok, options),
        *sections.study_section(study, load_study()),
        *sections.figures_section(figures),
        *sections.plan_and_environment(bundle.manifest),
    ]


def _write_figures(layout: BundleLayout, figures: Sequence[Figure]) -> list[Path]:
    """Remove plots/*.png no longer made, then write the fresh ones."""
    fresh = {Path(f.filename).name for f in figures}
    if layout.plots.is_dir():
        for stale in sorted(layout.plots.glob("*.png")):
            if stale.name not in fresh:
                stale.unlink()
    return [write_bytes_atomic(layout.root / fig.filename, fig.png) for fig in figures]


def build_report(
    bundle_dir: Path | str,
    *,
    baseline: str | None = None,
    grading_tables: Sequence[Path] = (),
    resamples: int = stats.DEFAULT_RESAMPLES,
    table: AxisTable = AXES,
) -> list[Path]:
    """Rebuild every derived file of ``bundle_dir``; returns the paths written.

    ``baseline`` defaults to "plain"; when the bundle has no finished cell of it the report says so
    (and names the scenarios it has) instead of failing, so a sweep without the baseline still gets
    its report. ``grading_tables`` adds user tables to the built-in ones; ``table``: the axes that name the
    cells' conditions (a test's table with a throwaway axis).
    """
    layout = BundleLayout(Path(bundle_dir))
    bundle = load_bundle(layout.root, table=table)
    options = report_options(
        bundle.manifest, baseline=baseline, extra_tables=grading_tables, resamples=resamples
    )
    order = scenario_order({c.record.scenario for c in bundle.cells}, options.baseline)
    cells = sorted(bundle.cells, key=cell_sort_key(order))

    summary_text = to_csv([summary_row(c, options.tables) for c in cells], summary_columns(options.tables))
    comparisons = comparison_rows(bundle, baseline=options.baseline, seed=options.seed, resamples=options.resamples)
    study = study_rows(comparisons, load_study(), tls_scenarios_in(bundle, options.baseline))
    figures = [*make_figures(bundle, order), *lifecycle.figures(groups(bundle.ok_cells)),
               *handshake_split.split_figures(sorted(bundle.ok_cells, key=cell_sort_key(order))),
               *events_figures(sorted(bundle.ok_cells, key=cell_sort_key(order)))]
    blocks = build_document(bundle, options, comparisons, figures, study, order)

    written = _write_figures(layout, figures)
    written.append(write_text_atomic(layout.summary, summary_text))
    written.append(write_text_atomic(layout.comparisons, to_csv(comparisons, COMPARISON_COLUMNS)))
    written.append(write_text_atomic(layout.report_md, render_markdown(blocks)))
    written.append(write_text_atomic(layout.report_html, render_html(blocks, _title(bundle))))
    return written


__all__ = ["build_document", "build_report"]
