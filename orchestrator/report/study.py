"""The study comparison: the published numbers of the seed study beside this run's, row by row.

The study's numbers are package data (orchestrator/grading/seed_study.yaml). Only impairment "none"
is compared, as the study measured no other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model.axes import NO_IMPAIRMENT
from orchestrator.report.loader import Bundle
from orchestrator.report.values import NA, Row, num


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
STUDY_TITLE = "The study vs this run"
STUDY_COLUMNS = (
    "payload",
    "scenario",
    "quantity",
    "study (published)",
    "this run, study's definition",
    "this run, this tool's definition",
)


def tls_scenarios_in(bundle: Bundle, baseline: str) -> set[str]:
    """The scenarios of finished cells that ran over TLS, other than the baseline."""
    return {
        c.record.scenario
        for c in bundle.ok_cells
        if (c.metrics or {}).get("inputs", {}).get("tls") is True and c.record.scenario != baseline
    }


def _find(rows: Sequence[Row], payload: int, scenario: str, name: str) -> Row | None:
    return next(
        (
            r
            for r in rows
            if r["payload"] == payload
            and r["scenario"] == scenario
            and r["impairment"] == NO_IMPAIRMENT
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


def _entries(comparisons: Sequence[Row], payload: int, scenario: str) -> tuple[tuple[str, str, str, str], ...]:
    """(quantity, key of the published number, this run by the study's definition, by this tool's)."""

    def find(name: str) -> Row | None:
        return _find(comparisons, payload, scenario, name)

    tag_only, whole = _overhead(find("tls_overhead_bytes"), find("frame_len_bytes"))
    retx = _pair(find("tcp_retransmissions"), "", 0).strip()
    return (
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


def study_rows(comparisons: Sequence[Row], study: StudyReference, tls_scenarios: Iterable[str]) -> list[Row]:
    """The study's published numbers beside this run's (impairment "none" only, as in the study)."""
    rows: list[Row] = []
    for scenario in sorted(set(tls_scenarios)):
        payloads = {
            r["payload"] for r in comparisons if r["scenario"] == scenario and r["impairment"] == NO_IMPAIRMENT
        }
        for payload in sorted(payloads):
            pub = _published(study.payloads.get(payload), payload)
            rows += [
                {
                    "payload": payload,
                    "scenario": scenario,
                    "quantity": quantity,
                    "study (published)": pub.get(key, "not in the study"),
                    "this run, study's definition": compat,
                    "this run, this tool's definition": tool,
                }
                for quantity, key, compat, tool in _entries(comparisons, payload, scenario)
            ]
    return rows
