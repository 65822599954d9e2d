"""Rows of summary.csv and comparisons.csv: one row per cell, one per (configuration, metric) pair.

Pure functions of a loaded bundle: no files are written here. ``None`` means not available and
is rendered as "n/a" in every output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis import grading, stats
from orchestrator.analysis.fleetlag import limited_label
from orchestrator.analysis.grading import IndexGrade, IndexTable, PassFailGrade, PassFailTable
from orchestrator.report.loader import (
    Bundle,
    Cell,
    delay_samples,
    frame_samples,
    jitter_samples,
    split_condition,
    transit_samples,
)
from orchestrator.report.order import groups, scenario_order
from orchestrator.report.values import Row, metric, text

Table = IndexTable | PassFailTable


# ---------------------------------------------------------------- grades
def grade_cell(cell: Cell, tables: Sequence[Table]) -> list[grading.Grade] | None:
    if cell.metrics is None:
        return None
    return [grading.grade(t, cell.metrics) for t in tables]


def grade_columns(tables: Sequence[Table]) -> list[str]:
    columns: list[str] = []
    for table in tables:
        if isinstance(table, IndexTable):
            columns += [f"{table.name}_{name}" for name in table.criteria]
            columns += [f"{table.name}_index", f"{table.name}_label"]
        else:
            columns.append(table.name)
    return columns


def grade_values(grades: Iterable[grading.Grade]) -> Row:
    row: Row = {}
    for g in grades:
        if isinstance(g, IndexGrade):
            for crit in g.criteria:
                row[f"{g.table}_{crit.name}"] = crit.index
            row[f"{g.table}_index"] = None if g.overall_index is None else round(g.overall_index, 4)
            row[f"{g.table}_label"] = g.overall_label
        elif isinstance(g, PassFailGrade):
            row[g.table] = g.verdict
    return row


# ---------------------------------------------------------------- summary.csv
SUMMARY_METRICS: tuple[tuple[str, str], ...] = (
    ("samples_expected", "inputs.samples_expected"),
    ("received_unique", "loss.received_unique"),
    ("delay_n", "delay_ms.n"),
    ("delay_mean_ms", "delay_ms.mean"),
    ("delay_median_ms", "delay_ms.median"),
    ("delay_p95_ms", "delay_ms.p95"),
    ("delay_p99_ms", "delay_ms.p99"),
    ("delay_ci95_low_ms", "delay_ms.ci95_low"),
    ("delay_ci95_high_ms", "delay_ms.ci95_high"),
    ("delay_negative_count", "delay_ms.negative_count"),
    ("broker_transit_mean_ms", "broker_transit_ms.mean"),
    ("broker_transit_median_ms", "broker_transit_ms.median"),
    ("uplink_median_ms", "uplink_ms.median"),
    ("uplink_robust_spread_ms", "uplink_ms.robust_spread"),
    ("jitter_mean_abs_diff_ms", "jitter_ms.mean_abs_diff"),
    ("jitter_std_ms", "jitter_ms.std"),
    ("loss_pct", "loss.loss_pct"),
    ("duplicates", "loss.duplicates"),
    ("out_of_order", "loss.out_of_order"),
    ("tcp_retransmissions", "loss.tcp_retransmissions"),
    ("wire_bps", "throughput.wire_bps"),
    ("goodput_bps", "throughput.goodput_bps"),
    ("mqtt_len", "overhead_bytes.mqtt_len"),
    ("tls_record_len", "overhead_bytes.tls_record_len"),
    ("tls_overhead", "overhead_bytes.tls_overhead"),
    ("frame_len", "overhead_bytes.frame_len"),
    ("tcp_connect_ms", "handshake.tcp_connect_ms"),
    ("tls_handshake_ms", "handshake.tls_handshake_ms"),
    ("mqtt_connect_ms", "handshake.mqtt_connect_ms"),
    ("handshake_bytes_c2s", "handshake.bytes_client_to_server"),
    ("handshake_bytes_s2c", "handshake.bytes_server_to_client"),
    ("study_mean_interarrival_ms", "study_compatible.mean_interarrival_ms"),
    ("study_throughput_bps", "study_compatible.throughput_bps"),
    ("study_loss_pct", "study_compatible.loss_pct"),
    ("broker_cpu_s", "resources.broker_cpu_s"),
    ("broker_peak_mem_bytes", "resources.broker_peak_mem_bytes"),
    ("publisher_cpu_s", "resources.publisher_cpu_s"),
)
SUMMARY_HEAD = (
    "cell_id",
    "scenario",
    "payload",
    "impairment",
    "connection",
    "repeat",
    "status",
    "error",
    "tls_version",
    "cipher_suite",
    "cipher_suite_id",
)
_INTEGER_COLUMNS = {
    "samples_expected",
    "received_unique",
    "delay_n",
    "delay_negative_count",
    "duplicates",
    "out_of_order",
    "tcp_retransmissions",
    "mqtt_len",
    "tls_record_len",
    "tls_overhead",
    "frame_len",
    "handshake_bytes_c2s",
    "handshake_bytes_s2c",
    "broker_peak_mem_bytes",
}


def summary_columns(tables: Sequence[Table]) -> list[str]:
    return [*SUMMARY_HEAD, *(name for name, _ in SUMMARY_METRICS), *grade_columns(tables), "limited", "warnings"]


def _count(value: float | None) -> int | float | None:
    return int(value) if value is not None and float(value).is_integer() else value


def summary_row(cell: Cell, tables: Sequence[Table]) -> Row:
    rec = cell.record
    row: Row = {
        "cell_id": rec.cell_id,
        "scenario": rec.scenario,
        "payload": rec.payload,
        "impairment": rec.impairment,
        "connection": rec.connection_mode,
        "repeat": rec.repeat,
        "status": rec.status,
        "error": rec.error,
        "tls_version": text(cell, "tls.version"),
        "cipher_suite": text(cell, "tls.cipher_suite"),
        "cipher_suite_id": text(cell, "tls.cipher_suite_id"),
    }
    for name, path in SUMMARY_METRICS:
        value = metric(cell, path)
        row[name] = _count(value) if name in _INTEGER_COLUMNS else value
    grades = grade_cell(cell, tables)
    if grades is not None:
        row.update(grade_values(grades))
    # a fleet's cell: "loader-limited" (analysis/fleetlag.py) and "broker-limited" (the broker's 90 %-of-a-core rule)
    fleet = (cell.metrics or {}).get("fleet")
    row["limited"] = limited_label(fleet.get("limited") if isinstance(fleet, dict) else None)
    warnings = (cell.metrics or {}).get("warnings") or []
    row["warnings"] = " | ".join(str(w) for w in warnings) if warnings else None
    return row


# ---------------------------------------------------------------- comparisons.csv
@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str
    label: str
    per_message: bool  # True: per-message samples pooled over repeats
    samples: Callable[[Cell], np.ndarray]


def _cell_value(path: str) -> Callable[[Cell], np.ndarray]:
    def extract(cell: Cell) -> np.ndarray:
        value = metric(cell, path)
        return np.empty(0) if value is None else np.array([value])

    return extract


def _per_run(name: str, unit: str, label: str, path: str) -> MetricSpec:
    return MetricSpec(name, unit, label, False, _cell_value(path))


COMPARED: tuple[MetricSpec, ...] = (
    MetricSpec("delay_ms", "ms", "one-way delay", True, delay_samples),
    MetricSpec("broker_transit_ms", "ms", "broker transit", True, transit_samples),
    MetricSpec(
        "jitter_abs_diff_ms", "ms", "|delay difference| of consecutive messages", True, jitter_samples
    ),
    MetricSpec("frame_len_bytes", "B", "wire bytes per PUBLISH (publisher->broker)", True, frame_samples),
    _per_run("tls_overhead_bytes", "B", "TLS bytes per PUBLISH", "overhead_bytes.tls_overhead"),
    _per_run("wire_bps", "bit/s", "throughput (wire)", "throughput.wire_bps"),
    _per_run("goodput_bps", "bit/s", "goodput (payload)", "throughput.goodput_bps"),
    _per_run("loss_pct", "%", "loss", "loss.loss_pct"),
    _per_run("tcp_retransmissions", "count", "TCP retransmissions", "loss.tcp_retransmissions"),
    # the connection lifecycle (cells that are not persistent; None elsewhere, so no row there)
    _per_run("wire_bytes_per_reading", "B", "wire bytes per reading (the publisher's connections, all of them)",
             "connections.wire_bytes_per_reading"),
    _per_run("setup_ms_per_reading", "ms", "connection set-up per reading (first SYN -> first PUBLISH)",
             "connections.setup_ms_per_reading"),
    _per_run("connection_tls_handshake_ms", "ms", "TLS handshake per connection (median)",
             "connections.tls_handshake_ms_median"),
    _per_run(
        "study_mean_interarrival_ms",
        "ms",
        "study-compatible 'delay' (mean inter-arrival)",
        "study_compatible.mean_interarrival_ms",
    ),
    _per_run(
        "study_throughput_bps", "bit/s", "study-compatible throughput", "study_compatible.throughput_bps"
    ),
    _per_run("study_loss_pct", "%", "study-compatible loss", "study_compatible.loss_pct"),
    _per_run("tcp_connect_ms", "ms", "TCP connect", "handshake.tcp_connect_ms"),
    _per_run("tls_handshake_ms", "ms", "TLS handshake", "handshake.tls_handshake_ms"),
    _per_run("mqtt_connect_ms", "ms", "MQTT CONNECT->CONNACK", "handshake.mqtt_connect_ms"),
    _per_run(
        "handshake_bytes_c2s", "B", "handshake bytes client->server", "handshake.bytes_client_to_server"
    ),
    _per_run(
        "handshake_bytes_s2c", "B", "handshake bytes server->client", "handshake.bytes_server_to_client"
    ),
    _per_run("broker_cpu_s", "s", "broker CPU (the Mosquitto process; its cgroup where the host cannot see it)",
             "resources.broker_cpu_s"),
    _per_run("broker_peak_mem_bytes", "B", "broker peak memory", "resources.broker_peak_mem_bytes"),
    _per_run("publisher_cpu_s", "s", "publisher CPU", "resources.publisher_cpu_s"),
)

COMPARISON_COLUMNS = (
    "payload",
    "impairment",
    "connection",
    "metric",
    "unit",
    "baseline",
    "scenario",
    "samples",
    "repeats_baseline",
    "repeats_scenario",
    "n_baseline",
    "n_scenario",
    "baseline_mean",
    "scenario_mean",
    "delta_mean",
    "delta_mean_pct",
    "ci95_mean_low",
    "ci95_mean_high",
    "baseline_median",
    "scenario_median",
    "delta_median",
    "delta_median_pct",
    "ci95_median_low",
    "ci95_median_high",
    "welch_p",
    "mannwhitney_p",
    "cliffs_delta",
    "cliffs_magnitude",
    "baseline_repeat_sd",
    "scenario_repeat_sd",
    "bootstrap_seed",
    "bootstrap_resamples",
)


def _per_repeat(cells: Sequence[Cell], spec: MetricSpec) -> list[float | None]:
    values = []
    for cell in cells:
        sample = spec.samples(cell)
        values.append(float(sample.mean()) if sample.size else None)
    return values


def _pooled(cells: Sequence[Cell], spec: MetricSpec) -> np.ndarray:
    parts = [spec.samples(c) for c in cells]
    return np.concatenate(parts) if parts else np.empty(0)


@dataclass(frozen=True)
class _Pair:
    """One scenario against the baseline at one (payload, impairment)."""

    payload: int
    impairment: str
    baseline: str
    scenario: str
    base_cells: Sequence[Cell]
    scen_cells: Sequence[Cell]


def _comparison_row(pair: _Pair, spec: MetricSpec, *, seed: int, resamples: int) -> Row | None:
    """One metric of ``pair``; None when neither side has a value."""
    base, scen = _pooled(pair.base_cells, spec), _pooled(pair.scen_cells, spec)
    if base.size == 0 and scen.size == 0:
        return None
    result = stats.compare_samples(base, scen, resamples=resamples, seed=seed)
    spread_b = stats.repeat_spread(_per_repeat(pair.base_cells, spec))
    spread_s = stats.repeat_spread(_per_repeat(pair.scen_cells, spec))
    return {
        "payload": pair.payload,
        "impairment": split_condition(pair.impairment)[0],
        "connection": split_condition(pair.impairment)[1],
        "metric": spec.name,
        "unit": spec.unit,
        "baseline": pair.baseline,
        "scenario": pair.scenario,
        "samples": "per message, repeats pooled" if spec.per_message else "one per repeat",
        "repeats_baseline": len(pair.base_cells),
        "repeats_scenario": len(pair.scen_cells),
        "n_baseline": result.n_baseline,
        "n_scenario": result.n_scenario,
        "baseline_mean": result.mean_baseline,
        "scenario_mean": result.mean_scenario,
        "delta_mean": result.delta_mean,
        "delta_mean_pct": result.delta_mean_pct,
        "ci95_mean_low": result.ci_mean_low,
        "ci95_mean_high": result.ci_mean_high,
        "baseline_median": result.median_baseline,
        "scenario_median": result.median_scenario,
        "delta_median": result.delta_median,
        "delta_median_pct": result.delta_median_pct,
        "ci95_median_low": result.ci_median_low,
        "ci95_median_high": result.ci_median_high,
        "welch_p": result.welch_p,
        "mannwhitney_p": result.mannwhitney_p,
        "cliffs_delta": result.cliffs_delta,
        "cliffs_magnitude": result.cliffs_magnitude,
        "baseline_repeat_sd": spread_b.sd if spread_b else None,
        "scenario_repeat_sd": spread_s.sd if spread_s else None,
        "bootstrap_seed": result.seed,
        "bootstrap_resamples": result.resamples,
    }


def _pairs(bundle: Bundle, baseline: str) -> list[_Pair]:
    """Every scenario that shares a (payload, impairment) with a finished baseline cell."""
    by_group = groups(bundle.ok_cells)
    pairs: list[_Pair] = []
    for payload, impairment in sorted({(p, i) for p, i, _ in by_group}):
        base_cells = by_group.get((payload, impairment, baseline))
        if not base_cells:
            continue
        names = [s for p, i, s in by_group if (p, i) == (payload, impairment)]
        pairs += [
            _Pair(payload, impairment, baseline, s, base_cells, by_group[(payload, impairment, s)])
            for s in scenario_order(names, baseline)[1:]
        ]
    return pairs


def compare_groups(
    where: tuple[int, str], sides: tuple[str, str], cells: tuple[Sequence[Cell], Sequence[Cell]], *, seed: int,
    resamples: int = stats.DEFAULT_RESAMPLES,
) -> list[Row]:
    """Every metric of ``cells[1]`` against ``cells[0]`` at ``where`` (payload, condition), named ``sides``
    (baseline, scenario): the rows comparisons.csv has, for cells that need not come from one bundle."""
    pair = _Pair(where[0], where[1], sides[0], sides[1], cells[0], cells[1])
    rows = (_comparison_row(pair, spec, seed=seed, resamples=resamples) for spec in COMPARED)
    return [row for row in rows if row is not None]


def comparison_rows(
    bundle: Bundle, *, baseline: str, seed: int, resamples: int = stats.DEFAULT_RESAMPLES
) -> list[Row]:
    """Every scenario vs ``baseline`` at each (payload, impairment), repeats pooled."""
    rows = (
        _comparison_row(pair, spec, seed=seed, resamples=resamples)
        for pair in _pairs(bundle, baseline)
        for spec in COMPARED
    )
    return [row for row in rows if row is not None]
