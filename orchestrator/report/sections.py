"""The report's blocks, section by section: what the numbers mean, cells, comparisons, grades, study.

Each function returns document blocks (orchestrator/report/document.py) from rows and cells that are
already computed; nothing is measured or written here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.analysis import grading
from orchestrator.analysis.grading import IndexGrade, IndexTable, PassFailGrade
from orchestrator.model.axes import PERSISTENT
from orchestrator.model.layout import COMPARISONS, MANIFEST, SUMMARY
from orchestrator.report import claims
from orchestrator.report.document import Block, Figure, Heading, Paragraph, Table
from orchestrator.report.loader import Bundle, Cell
from orchestrator.report.options import GradingTable, ReportOptions
from orchestrator.report.order import run_order
from orchestrator.report.rerun import reproduces_row
from orchestrator.report.study import OVERHEAD_SENTENCE, STUDY_COLUMNS, STUDY_TITLE, StudyReference
from orchestrator.report.tables import grade_cell
from orchestrator.report.values import NA, Row, cipher_suite, metric, num, pval, short_suite, suite_legend


# ---------------------------------------------------------------- header, plan, environment
def _scalar(value: Any) -> str:
    if value is None:
        return NA
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    if isinstance(value, str | int | float | bool):
        return str(value)
    return json.dumps(value, sort_keys=True)


def flatten(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as dotted keys, sorted."""
    items: list[tuple[str, Any]] = []
    for key, value in sorted(mapping.items(), key=lambda kv: str(kv[0])):
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            items += flatten(value, f"{name}.")
        else:
            items.append((name, value))
    return items


def _kv_table(mapping: Any, caption: str | None = None) -> Table:
    items = flatten(mapping) if isinstance(mapping, dict) else []
    return Table(("key", "value"), tuple((k, _scalar(v)) for k, v in items), caption)


def _git(manifest: dict[str, Any]) -> str:
    """The commit recorded by the sweep: "git_commit" (text) or "git" ({"commit", "dirty"})."""
    if isinstance(manifest.get("git_commit"), str):
        return manifest["git_commit"]
    git = manifest.get("git")
    if isinstance(git, dict) and git.get("commit"):
        return str(git["commit"]) + (" (uncommitted changes)" if git.get("dirty") else "")
    return NA


def header(bundle: Bundle, options: ReportOptions, analysed: int) -> Table:
    """What bundle this is, how it was made and with which statistics."""
    m = bundle.manifest
    excluded = len(bundle.excluded_cells) + len(bundle.incomplete)
    return Table(
        ("item", "value"),
        (
            ("bundle", bundle.root.name),
            ("created (UTC)", _scalar(m.get("created_utc"))),
            ("command", _scalar(m.get("command"))),
            ("tool version", _scalar(m.get("tool_version"))),
            ("git commit", _git(m)),
            *reproduces_row(m),
            ("sweep seed", _scalar(m.get("seed"))),
            ("run order", run_order(m.get("order"))),
            ("baseline scenario", options.baseline),
            ("bootstrap", f"{options.resamples} resamples, seed {options.seed}, 95 % percentile CI"),
            ("cells", f"{analysed} analysed, {excluded} excluded"),
        ),
    )


def plan_and_environment(manifest: dict[str, Any]) -> list[Block]:
    return [
        Heading(2, "Plan"),
        _kv_table(manifest.get("plan")),
        Heading(2, "Environment"),
        _kv_table(manifest.get("environment")),
    ]


# ---------------------------------------------------------------- what the numbers mean
def _publisher_kind(manifest: dict[str, Any]) -> str | None:
    for section in (manifest.get("plan"), manifest):
        if isinstance(section, dict) and isinstance(section.get("publisher"), str):
            return section["publisher"]
    return None


def _measured_overhead(cells: Sequence[Cell]) -> list[str]:
    found = sorted(
        {
            (str(cipher_suite(c) or c.record.scenario), int(v))
            for c in cells
            if (v := metric(c, "overhead_bytes.tls_overhead")) is not None
        }
    )
    return [f"{suite}: {value} B" for suite, value in found]


def _publisher_sentence(publisher: str | None, link: str) -> str:
    if publisher == "esp32":
        return (
            "Publisher: an ESP32 board (or board-emu, the emulated board: then each run's cell.json "
            "names it) over its own network path. The board's send times are on its own clock, mapped to "
            "the lab's by NTP-style exchanges with the lab's time-echo service before and after each "
            "cell; one-way delay and uplink are given only where the mapping's bound (metrics.json "
            "clock.bound_us) is at most a quarter of the uplink median, otherwise they are n/a with the "
            "reason (clock.one_way_delay). The ESP32 accelerates AES and SHA in hardware but not "
            "ChaCha20-Poly1305, which a cipher comparison on it must state."
        )
    if publisher in (None, "virtual"):
        return (
            ("" if publisher else f"{MANIFEST} does not name the publisher; if it was the default: ")
            + "Simulated values: the publisher is the virtual ESP32 (the firmware's portable core built "
            f"for Linux in a container), so the flame and MQ-2 readings in the payload are simulated and {link}. "
            "Its delays are therefore that link's, not WiFi's; the protocol costs (bytes, handshake) are the "
            "real ones."
        )
    return f"Publisher as recorded in {MANIFEST}: {publisher}."


def explanations(bundle: Bundle) -> list[str]:
    measured = _measured_overhead(bundle.ok_cells)
    overhead = OVERHEAD_SENTENCE + (
        f" Measured in this bundle per PUBLISH: {'; '.join(measured)}." if measured else ""
    ) + claims.overhead_check(bundle.ok_cells)
    return [
        "Inter-arrival time is not one-way delay. The study's 'delay' is the time span of the "
        "captured packets divided by (count - 1): the mean gap between messages, set mostly by the "
        "publishing interval. It is reported here as 'study-compatible' only. One-way delay is "
        "subscriber receive time minus the send time stamped in the payload, on a shared clock.",
        claims.loss_sentence(bundle.ok_cells),
        overhead,
        _publisher_sentence(_publisher_kind(bundle.manifest), claims.link_phrase(bundle.cells)),
        "n/a means the value could not be measured (for example no TLS handshake in plaintext, or "
        "delay without a shared clock); it is never replaced by a number.",
    ]


# ---------------------------------------------------------------- cells
SUMMARY_BLOCK_COLUMNS = (
    "cell",
    "status",
    "TLS",
    "n",
    "delay mean ms",
    "median ms",
    "p95 ms",
    "jitter ms",
    "loss %",
    "TCP retx",
    "wire bit/s",
    "goodput bit/s",
    "frame B",
    "TLS B",
)


def _grade_texts(cell: Cell, tables: Sequence[GradingTable]) -> list[str]:
    """Index grades, then pass/fail verdicts; n/a for each table when the cell has no metrics."""
    grades = grade_cell(cell, tables) or []
    if not grades:
        return [NA] * len(tables)
    return [num(g.overall_index, 2) for g in grades if isinstance(g, IndexGrade)] + [
        g.verdict for g in grades if isinstance(g, PassFailGrade)
    ]


def _summary_line(cell: Cell, tables: Sequence[GradingTable]) -> tuple[str, ...]:
    return (
        cell.record.cell_id,
        cell.record.status,
        short_suite(cell) or NA,
        num(metric(cell, "delay_ms.n"), 0),
        num(metric(cell, "delay_ms.mean")),
        num(metric(cell, "delay_ms.median")),
        num(metric(cell, "delay_ms.p95")),
        num(metric(cell, "jitter_ms.mean_abs_diff")),
        num(metric(cell, "loss.loss_pct"), 2),
        num(metric(cell, "loss.tcp_retransmissions"), 0),
        num(metric(cell, "throughput.wire_bps"), 1),
        num(metric(cell, "throughput.goodput_bps"), 1),
        num(metric(cell, "overhead_bytes.frame_len"), 0),
        num(metric(cell, "overhead_bytes.tls_overhead"), 0),
        *_grade_texts(cell, tables),
    )


def _summary_block(cells: Sequence[Cell], options: ReportOptions) -> Table:
    cols = [*SUMMARY_BLOCK_COLUMNS]
    cols += [f"{t.name} index" for t in options.tables if isinstance(t, IndexTable)]
    cols += [t.name for t in options.tables if not isinstance(t, IndexTable)]
    rows = tuple(_summary_line(cell, options.tables) for cell in cells)
    return Table(tuple(cols), rows, f"Headline metrics per cell (all columns in {SUMMARY})")


def cells_section(bundle: Bundle, cells: Sequence[Cell], options: ReportOptions) -> list[Block]:
    """The headline table of every cell, then the cells left out and why."""
    legend = suite_legend(cells)
    blocks: list[Block] = [Heading(2, "Cells"), _summary_block(cells, options),
                           *([Paragraph(legend)] if legend else []), Heading(2, "Excluded cells")]
    excluded: list[tuple[str, str, str]] = [(c.record.cell_id, c.record.status, c.record.error or NA)
                                            for c in cells if not c.ok]
    excluded += [(i.folder, "incomplete", i.reason) for i in bundle.incomplete]
    if not excluded:
        return [*blocks, Paragraph("None: every cell finished.")]
    return [
        *blocks,
        Paragraph("These cells did not finish; they are left out of every statistic, grade and plot."),
        Table(("cell", "status", "error"), tuple(excluded)),
    ]


# ---------------------------------------------------------------- comparisons
REPORTED_COMPARISONS = (
    "delay_ms",
    "broker_transit_ms",
    "jitter_abs_diff_ms",
    "frame_len_bytes",
    "wire_bps",
    "goodput_bps",
    "loss_pct",
    "study_mean_interarrival_ms",
    "tls_handshake_ms",
    "handshake_bytes_c2s",
    "handshake_bytes_s2c",
    "broker_cpu_s",
)
COMPARISON_BLOCK_COLUMNS = (
    "payload, condition",
    "comparison",
    "metric",
    "baseline mean",
    "scenario mean",
    "delta mean (%)",
    "95 % CI of delta mean",
    "delta median (%)",
    "Welch p",
    "Mann-Whitney p",
    "Cliff's delta",
)
SPREAD_BLOCK_COLUMNS = (
    "payload, condition",
    "comparison",
    "metric",
    "baseline repeats",
    "SD of repeat means",
    "scenario repeats",
    "SD of repeat means",
)


def _where(r: Row) -> str:
    """The payload and condition of a comparisons row: "65 B, none", "65 B, none + reconnect"."""
    connection = "" if r["connection"] == PERSISTENT else f" + {r['connection']}"
    return f"{r['payload']} B, {r['impairment']}{connection}"


def _comparison_line(r: Row) -> tuple[str, ...]:
    ci = (
        NA
        if r["ci95_mean_low"] is None
        else f"[{num(r['ci95_mean_low'], 3, True)}, {num(r['ci95_mean_high'], 3, True)}]"
    )
    cliff = NA if r["cliffs_delta"] is None else f"{r['cliffs_delta']:+.3f} ({r['cliffs_magnitude']})"
    return (
        _where(r),
        f"{r['scenario']} vs {r['baseline']}",
        f"{r['metric']} ({r['unit']})",
        num(r["baseline_mean"]),
        num(r["scenario_mean"]),
        f"{num(r['delta_mean'], 3, True)} ({num(r['delta_mean_pct'], 2, True)} %)",
        ci,
        f"{num(r['delta_median'], 3, True)} ({num(r['delta_median_pct'], 2, True)} %)",
        pval(r["welch_p"]),
        pval(r["mannwhitney_p"]),
        cliff,
    )


def _comparison_block(rows: Sequence[Row]) -> Table:
    out = tuple(_comparison_line(r) for r in rows if r["metric"] in REPORTED_COMPARISONS)
    return Table(
        COMPARISON_BLOCK_COLUMNS,
        out,
        f"Scenario minus baseline (all metrics and the CI of the median in {COMPARISONS})",
    )


def _spread_block(rows: Sequence[Row]) -> Table | None:
    out = [
        (
            _where(r),
            f"{r['scenario']} vs {r['baseline']}",
            r["metric"],
            str(r["repeats_baseline"]),
            num(r["baseline_repeat_sd"]),
            str(r["repeats_scenario"]),
            num(r["scenario_repeat_sd"]),
        )
        for r in rows
        if r["metric"] in REPORTED_COMPARISONS
        and (r["baseline_repeat_sd"] is not None or r["scenario_repeat_sd"] is not None)
    ]
    if not out:
        return None
    return Table(SPREAD_BLOCK_COLUMNS, tuple(out), "Between-repeat spread")


def comparisons_title(baseline: str) -> str:
    return f"Comparisons against the baseline ({baseline})"


def comparisons_section(comparisons: Sequence[Row], ok: Sequence[Cell], baseline: str) -> list[Block]:
    """Scenario minus baseline, and the spread between repeats; or why there is no comparison."""
    blocks: list[Block] = [Heading(2, comparisons_title(baseline))]
    if not comparisons:
        finished = ", ".join(sorted({c.record.scenario for c in ok})) or "none"
        return [
            *blocks,
            Paragraph(
                f"No comparison: no finished cell of the baseline scenario '{baseline}' shares a "
                f"payload and impairment with another scenario (finished scenarios: {finished}). "
                "Choose another baseline with --baseline."
            ),
        ]
    blocks += [
        Paragraph(
            "Per-message metrics pool the repeats of a configuration; per-run metrics (throughput, "
            "handshake) have one value per repeat, so their CI and tests need at least two repeats. "
            "Deltas are scenario minus baseline; Cliff's delta is P(scenario > baseline) - "
            "P(scenario < baseline), labelled after Romano et al. (2006)."
        ),
        _comparison_block(comparisons),
    ]
    spread = _spread_block(comparisons)
    return blocks if spread is None else [*blocks, spread]


# ---------------------------------------------------------------- grades
def _grade_line(cell: Cell, g: grading.Grade) -> tuple[str, ...] | None:
    if isinstance(g, IndexGrade):
        return (
            cell.record.cell_id,
            *(f"{num(c.value)} {c.unit} -> {c.index if c.index is not None else NA}" for c in g.criteria),
            num(g.overall_index, 2),
            g.overall_label or NA,
        )
    if isinstance(g, PassFailGrade):
        return (
            cell.record.cell_id,
            *(
                f"{num(r.value)} {r.unit} {r.op} {r.threshold:g}: "
                f"{ {True: 'pass', False: 'fail', None: NA}[r.passed] }"
                for r in g.results
            ),
            g.verdict,
        )
    return None


def _grade_columns(table: GradingTable) -> tuple[str, ...]:
    if isinstance(table, IndexTable):
        return ("cell", *(f"{n} ({c.metric})" for n, c in table.criteria.items()), "overall index", "label")
    return ("cell", *(f"{n} ({r.metric})" for n, r in table.requirements.items()), "verdict")


def grades_section(ok: Sequence[Cell], options: ReportOptions) -> list[Block]:
    blocks: list[Block] = [
        Heading(2, "QoS grades"),
        Paragraph(
            "Grades come from threshold tables kept as data files; the values are from secondary "
            "sources, as each table's caveat says. A table of your own in the same format can be added."
        ),
    ]
    for table in options.tables:
        lines = (_grade_line(cell, grading.grade(table, cell.metrics or {})) for cell in ok)
        blocks += [
            Heading(3, table.title),
            Table(_grade_columns(table), tuple(line for line in lines if line is not None)),
            Paragraph(f"Source: {table.source}"),
            Paragraph(f"Caveat: {table.caveat}"),
        ]
    return blocks


# ---------------------------------------------------------------- study, figures
def study_section(study: Sequence[Row], reference: StudyReference) -> list[Block]:
    """The study's published numbers beside this run's, with the study's source and caveat."""
    blocks: list[Block] = [Heading(2, STUDY_TITLE), Paragraph(OVERHEAD_SENTENCE)]
    if study:
        blocks.append(
            Table(
                STUDY_COLUMNS,
                tuple(tuple(str(r[c]) for c in STUDY_COLUMNS) for r in study),
                "Impairment 'none' only, as in the study",
            )
        )
    else:
        blocks.append(
            Paragraph(
                "No TLS scenario was compared with the baseline without impairment, so there is "
                "nothing to put beside the study's numbers."
            )
        )
    return [
        *blocks,
        Paragraph(f"Study: {' '.join(reference.title.split())}. Source: {reference.source}"),
        Paragraph(f"Caveat: {reference.caveat}"),
    ]


def figures_section(figures: Sequence[Figure]) -> list[Block]:
    shown: list[Block] = [*figures] or [Paragraph("No figure: no finished cell.")]
    return [Heading(2, "Figures"), *shown]
