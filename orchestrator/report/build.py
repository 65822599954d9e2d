"""build_report: rebuild every derived file of a bundle from runs/*/ and manifest.json alone.

Derived files: summary.csv, comparisons.csv, plots/*.png, report.md, report.html. Each is
written atomically; the same input gives byte-identical output (no clock, no random state
other than the recorded bootstrap seed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.analysis import grading, stats
from orchestrator.analysis.grading import IndexGrade, IndexTable, PassFailGrade
from orchestrator.errors import TestbedError
from orchestrator.report import plots
from orchestrator.report.document import (
    Block,
    Bullets,
    Figure,
    Heading,
    Paragraph,
    Table,
    render_html,
    render_markdown,
)
from orchestrator.report.loader import Bundle, Cell, delay_samples, load_bundle
from orchestrator.report.tables import (
    COMPARISON_COLUMNS,
    NA,
    OVERHEAD_SENTENCE,
    STUDY_COLUMNS,
    Row,
    csv_value,
    grade_cell,
    groups,
    load_study,
    metric,
    num,
    pval,
    scenario_order,
    study_rows,
    summary_columns,
    summary_row,
    to_csv,
)
from orchestrator.report.tables import comparison_rows as build_comparison_rows
from orchestrator.results.atomic import write_bytes_atomic, write_text_atomic

DEFAULT_BASELINE = "plain"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class ReportOptions:
    baseline: str
    seed: int
    resamples: int
    tables: tuple[grading.IndexTable | grading.PassFailTable, ...]


def bootstrap_seed(manifest: dict[str, Any]) -> int:
    """The sweep's recorded seed, or stats.DEFAULT_SEED when the manifest has none."""
    seed = manifest.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else stats.DEFAULT_SEED


def _tables(extra: Sequence[Path]) -> tuple[grading.IndexTable | grading.PassFailTable, ...]:
    tables = [*grading.builtin_tables(), *(grading.load_table(Path(p)) for p in extra)]
    seen: dict[str, str] = {}
    for table, origin in zip(tables, [*grading.BUILTIN_TABLES, *map(str, extra)], strict=True):
        if table.name in seen:
            raise TestbedError(
                f"{origin}: grading table name {table.name!r} is already used by {seen[table.name]}",
                hint="give your table another name",
            )
        seen[table.name] = origin
    return tuple(tables)


def _sort_key(order: Sequence[str]) -> Any:
    rank = {name: i for i, name in enumerate(order)}

    def key(cell: Cell) -> tuple[int, str, int, int, str]:
        r = cell.record
        return (r.payload, r.impairment, rank.get(r.scenario, len(rank)), r.repeat, r.cell_id)

    return key


def _label(cell: Cell, multi_repeat: bool) -> str:
    r = cell.record
    text = f"{r.scenario} {r.payload} B"
    if r.impairment != "none":
        text += f" {r.impairment}"
    return f"{text} r{r.repeat}" if multi_repeat else text


def _group_label(payload: int, impairment: str, scenario: str) -> str:
    return f"{scenario}\n{payload} B" + ("" if impairment == "none" else f"\n{impairment}")


# ---------------------------------------------------------------- figures
def make_figures(bundle: Bundle, order: Sequence[str]) -> list[Figure]:
    ok = sorted(bundle.ok_cells, key=_sort_key(order))
    colours = plots.scenario_colours(order)
    multi = any(c.record.repeat > 1 for c in ok)
    series = [
        plots.CellSeries(
            panel=f"{c.record.payload} B payload"
            + ("" if c.record.impairment == "none" else f", {c.record.impairment}"),
            scenario=c.record.scenario,
            repeat=c.record.repeat,
            label=_label(c, multi),
            values=delay_samples(c),
        )
        for c in ok
    ]
    by_group = groups(ok)
    keys = sorted(by_group, key=lambda k: (k[0], k[1], order.index(k[2]) if k[2] in order else len(order)))
    layers = []
    tput = []
    hand = []
    for key in keys:
        cells = by_group[key]
        label = _group_label(*key)
        per_layer = next(
            (
                c.metrics.get("overhead_bytes", {}).get("per_layer")
                for c in cells
                if c.metrics and isinstance(c.metrics.get("overhead_bytes"), dict)
            ),
            None,
        )
        if isinstance(per_layer, dict):
            layers.append((label, {k: v for k, v in per_layer.items() if isinstance(v, int | float)}))
        tput.append(
            (
                label,
                [metric(c, "throughput.wire_bps") for c in cells],
                [metric(c, "throughput.goodput_bps") for c in cells],
            )
        )

        def mean_of(path: str, _cells: list[Cell] = cells) -> float | None:
            values = [v for v in (metric(c, path) for c in _cells) if v is not None]
            return float(np.mean(values)) if values else None

        hand.append(
            plots.HandshakeBar(
                label,
                mean_of("handshake.tcp_connect_ms"),
                mean_of("handshake.tls_handshake_ms"),
                mean_of("handshake.mqtt_connect_ms"),
                mean_of("handshake.bytes_client_to_server"),
                mean_of("handshake.bytes_server_to_client"),
            )
        )
    made = [
        (
            "delay_cdf.png",
            "Empirical CDF of one-way delay per cell (line style = repeat).",
            plots.delay_cdf(series, colours),
        ),
        ("delay_box.png", "One-way delay per cell.", plots.delay_box(series, colours)),
        (
            "wire_bytes_by_layer.png",
            "Bytes on the wire per PUBLISH, stacked by layer (median run of each configuration).",
            plots.wire_layers(layers),
        ),
        (
            "throughput.png",
            "Throughput (every frame publisher->broker) and goodput (payload only); mean of "
            "repeats, error bar = SD across repeats.",
            plots.throughput_bars(tput),
        ),
        (
            "handshake.png",
            "Connection set-up: time per phase and bytes each way (mean of repeats).",
            plots.handshake(hand),
        ),
    ]
    return [Figure(f"{PLOTS_DIR}/{name}", caption, png) for name, caption, png in made if png is not None]


# ---------------------------------------------------------------- document
def _scalar(value: Any) -> str:
    if value is None:
        return NA
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    if isinstance(value, str | int | float | bool):
        return str(value)
    return json.dumps(value, sort_keys=True)


def _flatten(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as dotted keys, sorted."""
    items: list[tuple[str, Any]] = []
    for key, value in sorted(mapping.items(), key=lambda kv: str(kv[0])):
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            items += _flatten(value, f"{name}.")
        else:
            items.append((name, value))
    return items


def _kv_table(mapping: Any, caption: str | None = None) -> Table:
    items = _flatten(mapping) if isinstance(mapping, dict) else []
    return Table(("key", "value"), tuple((k, _scalar(v)) for k, v in items), caption)


def _git(manifest: dict[str, Any]) -> str:
    """The commit recorded by the sweep: "git_commit" (text) or "git" ({"commit", "dirty"})."""
    if isinstance(manifest.get("git_commit"), str):
        return manifest["git_commit"]
    git = manifest.get("git")
    if isinstance(git, dict) and git.get("commit"):
        return str(git["commit"]) + (" (uncommitted changes)" if git.get("dirty") else "")
    return NA


def _publisher_kind(manifest: dict[str, Any]) -> str | None:
    for section in (manifest.get("plan"), manifest):
        if isinstance(section, dict) and isinstance(section.get("publisher"), str):
            return section["publisher"]
    return None


def _measured_overhead(cells: Sequence[Cell]) -> list[str]:
    found = sorted(
        {
            (str((c.metrics or {}).get("tls", {}).get("cipher_suite") or c.record.scenario), int(v))
            for c in cells
            if (v := metric(c, "overhead_bytes.tls_overhead")) is not None
        }
    )
    return [f"{suite}: {value} B" for suite, value in found]


def explanations(bundle: Bundle) -> list[str]:
    publisher = _publisher_kind(bundle.manifest)
    measured = _measured_overhead(bundle.ok_cells)
    overhead = OVERHEAD_SENTENCE + (
        f" Measured in this bundle per PUBLISH: {'; '.join(measured)}." if measured else ""
    )
    if publisher == "esp32":
        simulated = (
            "Publisher: a real ESP32 board over WiFi; one-way delay is a number only when its SNTP "
            "clock offset was recorded, otherwise it is n/a."
        )
    elif publisher in (None, "virtual"):
        simulated = (
            ("" if publisher else "manifest.json does not name the publisher; if it was the default: ")
            + "Simulated values: the publisher is the virtual ESP32 (the firmware's portable core built "
            "for Linux in a container), so the flame and MQ-2 readings in the payload are simulated and "
            "the link is a Docker bridge on one host, not WiFi. Delays are therefore far smaller than "
            "over WiFi; the protocol costs (bytes, handshake) are the real ones."
        )
    else:
        simulated = f"Publisher as recorded in manifest.json: {publisher}."
    return [
        "Inter-arrival time is not one-way delay. The study's 'delay' is the time span of the "
        "captured packets divided by (count - 1): the mean gap between messages, set mostly by the "
        "publishing interval. It is reported here as 'study-compatible' only. One-way delay is "
        "subscriber receive time minus the send time stamped in the payload, on a shared clock.",
        "TCP hides loss. MQTT runs over TCP, so a dropped segment is retransmitted and the subscriber still "
        "receives every message: application loss stays at 0 % while delay grows. Retransmissions counted "
        "in the capture are reported beside the loss.",
        overhead,
        simulated,
        "n/a means the value could not be measured (for example no TLS handshake in plaintext, or "
        "delay without a shared clock); it is never replaced by a number.",
    ]


def _summary_block(cells: Sequence[Cell], options: ReportOptions) -> Table:
    index_tables = [t for t in options.tables if isinstance(t, IndexTable)]
    cols = [
        "cell",
        "status",
        "TLS suite",
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
    ]
    cols += [f"{t.name} index" for t in index_tables]
    cols += [t.name for t in options.tables if not isinstance(t, IndexTable)]
    rows = []
    for cell in cells:
        grades = grade_cell(cell, options.tables) or []
        grade_text = []
        for g in grades:
            if isinstance(g, IndexGrade):
                grade_text.append(num(g.overall_index, 2))
        grade_text += [g.verdict for g in grades if isinstance(g, PassFailGrade)]
        if not grades:
            grade_text = [NA] * (len(options.tables))
        rows.append(
            (
                cell.record.cell_id,
                cell.record.status,
                (cell.metrics or {}).get("tls", {}).get("cipher_suite") or NA,
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
                *grade_text,
            )
        )
    return Table(tuple(cols), tuple(rows), "Headline metrics per cell (all columns in summary.csv)")


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
)


def _comparison_block(rows: Sequence[Row]) -> Table:
    out = []
    for r in rows:
        if r["metric"] not in REPORTED_COMPARISONS:
            continue
        ci = (
            NA
            if r["ci95_mean_low"] is None
            else f"[{num(r['ci95_mean_low'], 3, True)}, {num(r['ci95_mean_high'], 3, True)}]"
        )
        cliff = NA if r["cliffs_delta"] is None else f"{r['cliffs_delta']:+.3f} ({r['cliffs_magnitude']})"
        out.append(
            (
                f"{r['payload']} B",
                r["impairment"],
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
        )
    cols = (
        "payload",
        "impairment",
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
    return Table(
        cols, tuple(out), "Scenario minus baseline (all metrics and the CI of the median in comparisons.csv)"
    )


def _spread_block(rows: Sequence[Row]) -> Table | None:
    out = [
        (
            f"{r['payload']} B",
            r["impairment"],
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
    return Table(
        (
            "payload",
            "impairment",
            "comparison",
            "metric",
            "baseline repeats",
            "SD of repeat means",
            "scenario repeats",
            "SD of repeat means",
        ),
        tuple(out),
        "Between-repeat spread",
    )


def _grades_block(cells: Sequence[Cell], options: ReportOptions) -> list[Block]:
    blocks: list[Block] = []
    for table in options.tables:
        rows = []
        for cell in cells:
            g = grading.grade(table, cell.metrics or {})
            if isinstance(g, IndexGrade):
                rows.append(
                    (
                        cell.record.cell_id,
                        *(
                            f"{num(c.value)} {c.unit} -> {c.index if c.index is not None else NA}"
                            for c in g.criteria
                        ),
                        num(g.overall_index, 2),
                        g.overall_label or NA,
                    )
                )
            elif isinstance(g, PassFailGrade):
                rows.append(
                    (
                        cell.record.cell_id,
                        *(
                            f"{num(r.value)} {r.unit} {r.op} {r.threshold:g}: "
                            f"{ {True: 'pass', False: 'fail', None: NA}[r.passed] }"
                            for r in g.results
                        ),
                        g.verdict,
                    )
                )
        if isinstance(table, IndexTable):
            cols = (
                "cell",
                *(f"{n} ({c.metric})" for n, c in table.criteria.items()),
                "overall index",
                "label",
            )
        else:
            cols = ("cell", *(f"{n} ({r.metric})" for n, r in table.requirements.items()), "verdict")
        blocks += [
            Heading(3, table.title),
            Table(cols, tuple(rows)),
            Paragraph(f"Source: {table.source}"),
            Paragraph(f"Caveat: {table.caveat}"),
        ]
    return blocks


def build_document(
    bundle: Bundle,
    options: ReportOptions,
    comparisons: Sequence[Row],
    figures: Sequence[Figure],
    study: Sequence[Row],
    order: Sequence[str],
) -> list[Block]:
    m = bundle.manifest
    all_cells = sorted(bundle.cells, key=_sort_key(order))
    ok = [c for c in all_cells if c.ok]
    header = Table(
        ("item", "value"),
        (
            ("bundle", bundle.root.name),
            ("created (UTC)", _scalar(m.get("created_utc"))),
            ("command", _scalar(m.get("command"))),
            ("tool version", _scalar(m.get("tool_version"))),
            ("git commit", _git(m)),
            ("sweep seed", _scalar(m.get("seed"))),
            ("baseline scenario", options.baseline),
            ("bootstrap", f"{options.resamples} resamples, seed {options.seed}, 95 % percentile CI"),
            ("cells", f"{len(ok)} analysed, {len(bundle.excluded_cells) + len(bundle.incomplete)} excluded"),
        ),
    )
    blocks: list[Block] = [
        Heading(1, f"MQTT over TLS vs plaintext: {bundle.root.name}"),
        header,
        Heading(2, "What the numbers mean"),
        Bullets(tuple(explanations(bundle))),
        Heading(2, "Cells"),
        _summary_block(all_cells, options),
        Heading(2, "Excluded cells"),
    ]
    excluded = [(c.record.cell_id, c.record.status, c.record.error or NA) for c in all_cells if not c.ok]
    excluded += [(i.folder, "incomplete", i.reason) for i in bundle.incomplete]
    if excluded:
        blocks += [
            Paragraph("These cells did not finish; they are left out of every statistic, grade and plot."),
            Table(("cell", "status", "error"), tuple(excluded)),
        ]
    else:
        blocks.append(Paragraph("None: every cell finished."))
    blocks.append(Heading(2, f"Comparisons against the baseline ({options.baseline})"))
    finished = ", ".join(sorted({c.record.scenario for c in ok})) or "none"
    if comparisons:
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
        if spread is not None:
            blocks.append(spread)
    else:
        blocks.append(
            Paragraph(
                f"No comparison: no finished cell of the baseline scenario '{options.baseline}' shares a "
                f"payload and impairment with another scenario (finished scenarios: {finished}). "
                "Choose another baseline with --baseline."
            )
        )
    blocks.append(Heading(2, "QoS grades"))
    blocks.append(
        Paragraph(
            "Grades come from threshold tables kept as data files; the values are from secondary "
            "sources, as each table's caveat says. A table of your own in the same format can be added."
        )
    )
    blocks += _grades_block(ok, options)
    study_ref = load_study()
    blocks += [Heading(2, "The study vs this run"), Paragraph(OVERHEAD_SENTENCE)]
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
    blocks += [
        Paragraph(f"Study: {' '.join(study_ref.title.split())}. Source: {study_ref.source}"),
        Paragraph(f"Caveat: {study_ref.caveat}"),
    ]
    blocks.append(Heading(2, "Figures"))
    blocks += list(figures) or [Paragraph("No figure: no finished cell.")]
    blocks += [
        Heading(2, "Plan"),
        _kv_table(m.get("plan")),
        Heading(2, "Environment"),
        _kv_table(m.get("environment")),
    ]
    return blocks


# ---------------------------------------------------------------- entry point
def build_report(
    bundle_dir: Path | str,
    *,
    baseline: str | None = None,
    grading_tables: Sequence[Path] = (),
    resamples: int = stats.DEFAULT_RESAMPLES,
) -> list[Path]:
    """Rebuild every derived file of ``bundle_dir``; returns the paths written.

    ``baseline`` defaults to "plain"; when the bundle has no finished cell of it the report says so
    (and names the scenarios it has) instead of failing, so a sweep without the baseline still gets
    its report. ``grading_tables`` adds user tables to the built-in ones.
    """
    root = Path(bundle_dir)
    bundle = load_bundle(root)
    scenarios = {c.record.scenario for c in bundle.cells}
    options = ReportOptions(
        baseline=baseline or DEFAULT_BASELINE,
        seed=bootstrap_seed(bundle.manifest),
        resamples=resamples,
        tables=_tables(grading_tables),
    )
    order = scenario_order(scenarios, options.baseline)
    cells = sorted(bundle.cells, key=_sort_key(order))

    summary_text = to_csv([summary_row(c, options.tables) for c in cells], summary_columns(options.tables))
    comparisons = build_comparison_rows(
        bundle, baseline=options.baseline, seed=options.seed, resamples=options.resamples
    )
    tls = {
        c.record.scenario
        for c in bundle.ok_cells
        if (c.metrics or {}).get("inputs", {}).get("tls") is True and c.record.scenario != options.baseline
    }
    study = study_rows(comparisons, load_study(), tls)
    figures = make_figures(bundle, order)
    blocks = build_document(bundle, options, comparisons, figures, study, order)
    title = f"MQTT over TLS vs plaintext: {root.name}"

    written: list[Path] = []
    plots_dir = root / PLOTS_DIR
    fresh = {Path(f.filename).name for f in figures}
    if plots_dir.is_dir():
        for stale in sorted(plots_dir.glob("*.png")):
            if stale.name not in fresh:
                stale.unlink()
    for fig in figures:
        written.append(write_bytes_atomic(root / fig.filename, fig.png))
    written.append(write_text_atomic(root / "summary.csv", summary_text))
    written.append(write_text_atomic(root / "comparisons.csv", to_csv(comparisons, COMPARISON_COLUMNS)))
    written.append(write_text_atomic(root / "report.md", render_markdown(blocks)))
    written.append(write_text_atomic(root / "report.html", render_html(blocks, title)))
    return written


__all__ = ["build_report", "bootstrap_seed", "csv_value"]
