"""Rows of summary.csv and comparisons.csv, and the "study vs this run" table.

Pure functions of a loaded bundle: no files are written here. ``None`` means not available and
is rendered as "n/a" in every output.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.analysis import grading, stats
from orchestrator.analysis.grading import IndexGrade, IndexTable, PassFailGrade, PassFailTable
from orchestrator.report.loader import (
    Bundle,
    Cell,
    delay_available,
    delay_samples,
    frame_samples,
    jitter_samples,
    transit_samples,
)

NA = "n/a"
Row = dict[str, Any]
Table = IndexTable | PassFailTable


# ---------------------------------------------------------------- formatting
def csv_value(value: Any) -> str:
    """Deterministic CSV text: n/a for missing, 10 significant digits for floats."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float | np.floating):
        return NA if not math.isfinite(value) else f"{float(value):.10g}"
    return str(value)


def to_csv(rows: Sequence[Row], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_value(row.get(c)) for c in columns])
    return out.getvalue()


def num(value: float | None, decimals: int = 3, signed: bool = False) -> str:
    """A number for people: n/a when missing."""
    if value is None or not math.isfinite(value):
        return NA
    text = f"{value:+,.{decimals}f}" if signed else f"{value:,.{decimals}f}"
    if text.lstrip("+-").strip("0.,") == "":  # rounds to zero: no sign
        text = text.lstrip("+-")
        return "+" + text if signed else text
    return text


def pval(value: float | None) -> str:
    if value is None:
        return NA
    return "<1e-300" if value == 0 else f"{value:.3g}"


# ---------------------------------------------------------------- metric access
def metric(cell: Cell, path: str) -> float | None:
    """A number from the cell's metrics.json; delay_ms.* is None when delay is unavailable."""
    if cell.metrics is None:
        return None
    if path.startswith("delay_ms.") and not delay_available(cell.metrics):
        return None
    return grading.metric_value(cell.metrics, path)


def text(cell: Cell, path: str) -> str | None:
    node: Any = cell.metrics
    for key in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node if isinstance(node, str) else None


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
    "repeat",
    "status",
    "error",
    "tls_version",
    "cipher_suite",
    "cipher_suite_id",
)


def summary_columns(tables: Sequence[Table]) -> list[str]:
    return [*SUMMARY_HEAD, *(name for name, _ in SUMMARY_METRICS), *grade_columns(tables), "warnings"]


def _count(value: float | None) -> int | float | None:
    return int(value) if value is not None and float(value).is_integer() else value


def summary_row(cell: Cell, tables: Sequence[Table]) -> Row:
    rec = cell.record
    row: Row = {
        "cell_id": rec.cell_id,
        "scenario": rec.scenario,
        "payload": rec.payload,
        "impairment": rec.impairment,
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
    warnings = (cell.metrics or {}).get("warnings") or []
    row["warnings"] = " | ".join(str(w) for w in warnings) if warnings else None
    return row


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
    _per_run("broker_cpu_s", "s", "broker CPU", "resources.broker_cpu_s"),
    _per_run("broker_peak_mem_bytes", "B", "broker peak memory", "resources.broker_peak_mem_bytes"),
    _per_run("publisher_cpu_s", "s", "publisher CPU", "resources.publisher_cpu_s"),
)

COMPARISON_COLUMNS = (
    "payload",
    "impairment",
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


def scenario_order(names: Iterable[str], baseline: str) -> list[str]:
    """Baseline first, then the others alphabetically."""
    unique = sorted(set(names))
    return ([baseline] if baseline in unique else []) + [n for n in unique if n != baseline]


def groups(cells: Sequence[Cell]) -> dict[tuple[int, str, str], list[Cell]]:
    """ok cells by (payload, impairment, scenario), repeats in order."""
    out: dict[tuple[int, str, str], list[Cell]] = {}
    for cell in sorted(cells, key=lambda c: (c.group, c.record.repeat, c.record.cell_id)):
        out.setdefault(cell.group, []).append(cell)
    return out


def _per_repeat(cells: Sequence[Cell], spec: MetricSpec) -> list[float | None]:
    values = []
    for cell in cells:
        sample = spec.samples(cell)
        values.append(float(sample.mean()) if sample.size else None)
    return values


def _pooled(cells: Sequence[Cell], spec: MetricSpec) -> np.ndarray:
    parts = [spec.samples(c) for c in cells]
    return np.concatenate(parts) if parts else np.empty(0)


def comparison_rows(
    bundle: Bundle, *, baseline: str, seed: int, resamples: int = stats.DEFAULT_RESAMPLES
) -> list[Row]:
    """Every scenario vs ``baseline`` at each (payload, impairment), repeats pooled."""
    by_group = groups(bundle.ok_cells)
    rows: list[Row] = []
    keys = sorted({(p, i) for p, i, _ in by_group})
    for payload, impairment in keys:
        base_cells = by_group.get((payload, impairment, baseline))
        if not base_cells:
            continue
        names = [s for p, i, s in by_group if (p, i) == (payload, impairment)]
        for scenario in scenario_order(names, baseline)[1:]:
            scen_cells = by_group[(payload, impairment, scenario)]
            for spec in COMPARED:
                base, scen = _pooled(base_cells, spec), _pooled(scen_cells, spec)
                if base.size == 0 and scen.size == 0:
                    continue
                result = stats.compare(base, scen, resamples=resamples, seed=seed)
                spread_b = stats.repeat_spread(_per_repeat(base_cells, spec))
                spread_s = stats.repeat_spread(_per_repeat(scen_cells, spec))
                rows.append(
                    {
                        "payload": payload,
                        "impairment": impairment,
                        "metric": spec.name,
                        "unit": spec.unit,
                        "baseline": baseline,
                        "scenario": scenario,
                        "samples": "per message, repeats pooled" if spec.per_message else "one per repeat",
                        "repeats_baseline": len(base_cells),
                        "repeats_scenario": len(scen_cells),
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
                )
    return rows


# ---------------------------------------------------------------- the study's published numbers
class StudyPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tls_message_bytes: int
    tls_overhead_bytes: int
    delay_increase_ms: float
    delay_increase_pct: float = Field(gt=0)
    throughput_increase_bps: float
    throughput_increase_pct: float = Field(gt=0)
    loss_pct_plain: float
    loss_pct_tls: float

    @property
    def implied_delay_ms(self) -> float:
        return self.delay_increase_ms / self.delay_increase_pct * 100.0

    @property
    def implied_throughput_bps(self) -> float:
        return self.throughput_increase_bps / self.throughput_increase_pct * 100.0


class StudyReference(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    title: str
    source: str
    caveat: str
    payloads: dict[int, StudyPayload]


def load_study() -> StudyReference:
    ref = resources.files("orchestrator.grading").joinpath("seed_study.yaml")
    return StudyReference.model_validate(yaml.safe_load(ref.read_text(encoding="utf-8")))


OVERHEAD_SENTENCE = (
    "The study counted 16 B per message, the Poly1305 authentication tag alone; on the wire every "
    "TLS 1.2 ChaCha20-Poly1305 record also carries a 5-byte record header, so each PUBLISH grows by "
    "5 + 16 = 21 B (RFC 7905; TLS 1.3 adds one more byte, the inner content type, and AES-GCM in "
    "TLS 1.2 adds an 8-byte explicit nonce: 29 B)."
)
STUDY_COLUMNS = (
    "payload",
    "scenario",
    "quantity",
    "study (published)",
    "this run, study's definition",
    "this run, this tool's definition",
)


def _find(rows: Sequence[Row], payload: int, scenario: str, name: str) -> Row | None:
    return next(
        (
            r
            for r in rows
            if r["payload"] == payload
            and r["scenario"] == scenario
            and r["impairment"] == "none"
            and r["metric"] == name
        ),
        None,
    )


def _delta(row: Row | None, unit: str, decimals: int, ci: bool = False) -> str:
    if row is None or row["delta_mean"] is None:
        return NA
    delta = num(row["delta_mean"], decimals, signed=True)
    out = f"{delta} {unit} ({num(row['delta_mean_pct'], 2, signed=True)} %)"
    if ci and row["ci95_mean_low"] is not None:
        low, high = num(row["ci95_mean_low"], decimals, True), num(row["ci95_mean_high"], decimals, True)
        out += f", 95 % CI [{low}, {high}]"
    return out


def _pair(row: Row | None, unit: str, decimals: int) -> str:
    if row is None:
        return NA
    return f"{num(row['baseline_mean'], decimals)} / {num(row['scenario_mean'], decimals)} {unit}"


def _base(row: Row | None, unit: str, decimals: int) -> str:
    return (
        NA if row is None or row["baseline_mean"] is None else f"{num(row['baseline_mean'], decimals)} {unit}"
    )


def _published(pub: StudyPayload | None, payload: int) -> dict[str, str]:
    if pub is None:
        return {}
    return {
        "overhead": f"+{pub.tls_overhead_bytes} B ({payload} -> {pub.tls_message_bytes} B)",
        "delay": f"+{pub.delay_increase_ms} ms (+{pub.delay_increase_pct} %)",
        "throughput": f"+{pub.throughput_increase_bps} bps (+{pub.throughput_increase_pct} %)",
        "loss": f"{pub.loss_pct_plain:g} / {pub.loss_pct_tls:g} %",
        "base_delay": f"about {pub.implied_delay_ms:.1f} ms",
        "base_throughput": f"about {pub.implied_throughput_bps:.1f} bps",
    }


def _overhead(overhead: Row | None, frames: Row | None) -> tuple[str, str]:
    """(tag-only reading, whole-record reading) of the measured TLS bytes per PUBLISH."""
    record = None if overhead is None else overhead["scenario_median"]
    if record is None:
        return NA, NA
    frame = (
        ""
        if frames is None
        else (f"; frame {num(frames['baseline_median'], 0)} -> {num(frames['scenario_median'], 0)} B")
    )
    return (
        f"{num(record - 5, 0, True)} B (record minus its 5 B header)",
        f"{num(record, 0, True)} B per TLS record (5 B header + {num(record - 5, 0)} B){frame}",
    )


def study_rows(comparisons: Sequence[Row], study: StudyReference, tls_scenarios: Iterable[str]) -> list[Row]:
    """The study's published numbers beside this run's (impairment "none" only, as in the study)."""
    rows: list[Row] = []
    for scenario in sorted(set(tls_scenarios)):
        payloads = {
            r["payload"] for r in comparisons if r["scenario"] == scenario and r["impairment"] == "none"
        }
        for payload in sorted(payloads):
            pub = _published(study.payloads.get(payload), payload)

            def find(name: str, _p: int = payload, _s: str = scenario) -> Row | None:
                return _find(comparisons, _p, _s, name)

            tag_only, whole = _overhead(find("tls_overhead_bytes"), find("frame_len_bytes"))
            retx = _pair(find("tcp_retransmissions"), "", 0).strip()
            entries = (
                ("TLS bytes added per message", "overhead", tag_only, whole),
                (
                    "delay increase with TLS",
                    "delay",
                    _delta(find("study_mean_interarrival_ms"), "ms", 3),
                    "one-way: " + _delta(find("delay_ms"), "ms", 3, ci=True),
                ),
                (
                    "throughput increase with TLS",
                    "throughput",
                    _delta(find("study_throughput_bps"), "bit/s", 2),
                    "wire: " + _delta(find("wire_bps"), "bit/s", 2),
                ),
                (
                    "packet loss plain / TLS",
                    "loss",
                    _pair(find("study_loss_pct"), "%", 2),
                    f"{_pair(find('loss_pct'), '%', 2)}; TCP retransmissions {retx}",
                ),
                (
                    "plaintext 'delay' (study: derived from its % increase)",
                    "base_delay",
                    _base(find("study_mean_interarrival_ms"), "ms", 3),
                    "one-way: " + _base(find("delay_ms"), "ms", 3),
                ),
                (
                    "plaintext throughput (study: derived from its % increase)",
                    "base_throughput",
                    _base(find("study_throughput_bps"), "bit/s", 2),
                    "wire: " + _base(find("wire_bps"), "bit/s", 2),
                ),
            )
            for quantity, key, compat, tool in entries:
                rows.append(
                    {
                        "payload": payload,
                        "scenario": scenario,
                        "quantity": quantity,
                        "study (published)": pub.get(key, "not in the study"),
                        "this run, study's definition": compat,
                        "this run, this tool's definition": tool,
                    }
                )
    return rows
