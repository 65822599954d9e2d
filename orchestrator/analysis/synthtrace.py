"""A synthetic current trace of a run with known truth (issue 42, part 4), in the PPK2's and Otii's CSV formats.

Written in Python, not in board-emu's C++: `testbed energy synth RUN` writes it for any run folder (a board-emu
run's, or the board-timed run the tests build), from the run's own events (analysis/tracealign.py's phases).
The truth is a current that is constant within each phase (``SynthSpec.levels_ma``) on the run's clock; its charge
per phase and per reading is integrated exactly. The instrument's view of it: samples at ``rate_hz`` on the
instrument's clock, which starts ``lead_s`` before the run's first event and runs ``drift_ppm`` fast against the
run's, each sample the mean current over its period plus Gaussian noise (``noise_ma``), and a marker channel
high for ``marker_pulse_s`` from each connection start and each PUBLISH (as the firmware's marker pin would be).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from orchestrator.analysis.powertrace import PPK2_HEADERS, Trace
from orchestrator.analysis.tracealign import MEASURED_PHASES, RunConnection, marks, trace_phases

DEFAULT_LEVELS = {"tcp": 112.0, "tls": 128.0, "mqtt": 106.0, "publish": 185.0, "idle": 96.0, "between": 41.0}
OTII_HEADER = ("Timestamp (s)", "Main current (A)", "GPI1")


@dataclass(frozen=True)
class SynthSpec:
    levels_ma: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LEVELS))
    rate_hz: float = 10_000.0
    drift_ppm: float = 150.0
    lead_s: float = 0.8
    tail_s: float = 0.5
    noise_ma: float = 2.0
    marker_pulse_s: float = 0.001
    seed: int = 0


@dataclass(frozen=True)
class Synthetic:
    trace: Trace
    truth: dict[str, object]  # phases {name: {mc, seconds}}, total_mc, per_reading_mc, the true map


def _piecewise(conns: Sequence[RunConnection], levels: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints (run clock) and the cumulative charge (mC) at each: the truth's charge function."""
    rows = sorted((t0, t1, levels[name]) for name, _i, t0, t1 in trace_phases(conns) if t1 > t0)
    base = levels["between"]
    points, cum = [rows[0][0] - 1e6], [0.0]
    for t0, t1, level in rows:
        cum.append(cum[-1] + (t0 - points[-1]) * base)
        points.append(t0)
        cum.append(cum[-1] + (t1 - t0) * level)
        points.append(t1)
    cum.append(cum[-1] + 1e6 * base)
    points.append(points[-1] + 1e6)
    return np.array(points), np.array(cum)


def synthesize(conns: Sequence[RunConnection], readings: int, spec: SynthSpec | None = None) -> Synthetic:
    """The instrument's samples of the truth, and the truth itself."""
    spec = spec or SynthSpec()
    rng = np.random.default_rng(spec.seed)
    points, cum = _piecewise(conns, spec.levels_ma)
    ref, last = conns[0].start, max(c.end for c in conns)
    scale = 1 + spec.drift_ppm * 1e-6
    n = int(((last - ref) * scale + spec.lead_s + spec.tail_s) * spec.rate_hz)
    t_instr = np.arange(n + 1) / spec.rate_hz
    run_t = ref + (t_instr - spec.lead_s) / scale
    q = np.interp(run_t, points, cum)
    current = np.diff(q) / np.diff(run_t) + rng.normal(0.0, spec.noise_ma, n)
    marker = np.zeros(n, dtype=np.int8)
    for m in marks(conns):
        t0 = spec.lead_s + (m - ref) * scale
        marker[int(np.ceil(t0 * spec.rate_hz)):int(np.ceil((t0 + spec.marker_pulse_s) * spec.rate_hz))] = 1
    trace = Trace(t_instr[:-1], current, marker, "synthetic", "synthetic", "D0")
    return Synthetic(trace, _truth(conns, readings, points, cum, spec, scale))


def _truth(conns: Sequence[RunConnection], readings: int, points: np.ndarray, cum: np.ndarray, spec: SynthSpec,
           scale: float) -> dict[str, object]:
    per: dict[str, dict[str, float]] = {p: {"mc": 0.0, "seconds": 0.0} for p in MEASURED_PHASES}
    for name, _i, t0, t1 in trace_phases(conns):
        per[name]["mc"] += float(np.interp(t1, points, cum) - np.interp(t0, points, cum))
        per[name]["seconds"] += t1 - t0
    total = float(np.interp(max(c.end for c in conns), points, cum) - np.interp(conns[0].start, points, cum))
    return {"phases": per, "total_mc": total, "per_reading_mc": total / readings if readings else None,
            "map": {"ref": conns[0].start, "offset": spec.lead_s, "scale": scale},
            "spec": {"rate_hz": spec.rate_hz, "drift_ppm": spec.drift_ppm, "noise_ma": spec.noise_ma,
                     "lead_s": spec.lead_s, "levels_ma": spec.levels_ma, "seed": spec.seed}}


def write_ppk2(trace: Trace, path: Path, variant: str = PPK2_HEADERS[1]) -> Path:
    """The trace as the Power Profiler app exports it (``variant``: one of PPK2_HEADERS; marker on D0)."""
    marker = trace.marker if trace.marker is not None else np.zeros(trace.time_s.size, dtype=np.int8)
    ms = np.char.mod("%.4f", trace.time_s * 1e3)
    ua = np.char.mod("%.3f", trace.current_ma * 1e3)
    cols = [ms, ua]
    if variant.endswith("D0-D7"):
        cols.append(np.where(marker > 0, "10000000", "00000000"))
    elif variant.endswith("Bits"):
        cols.append(np.char.mod("%d", marker.astype(int)))
    elif variant.endswith("D7"):
        cols += [np.char.mod("%d", marker.astype(int)), *(np.full(marker.size, "0") for _ in range(7))]
    lines = np.char.add(cols[0], "")
    for col in cols[1:]:
        lines = np.char.add(np.char.add(lines, ","), col)
    path.write_text(variant + "\n" + "\n".join(lines.tolist()) + "\n", encoding="utf-8")
    return path


def write_otii(trace: Trace, path: Path) -> Path:
    """The trace as an Otii CSV export (time in s, main current in A, GPI1 the marker)."""
    marker = trace.marker if trace.marker is not None else np.zeros(trace.time_s.size, dtype=np.int8)
    body = np.column_stack([trace.time_s, trace.current_ma / 1e3, marker])
    with path.open("w", encoding="utf-8") as fh:
        fh.write(",".join(OTII_HEADER) + "\n")
        np.savetxt(fh, body, fmt=("%.7f", "%.9f", "%d"), delimiter=",")
    return path
