"""A current trace aligned to a run's events, and its charge per phase and per reading (issue 42, part 3).

The run's events are on the run's clock (the capture's: each connection's SYN, the end of its TCP set-up and of
its TLS handshake, its CONNACK, each PUBLISH's arrival at the broker, its end). The trace is on the instrument's
clock, which starts anywhere and drifts. The map is linear, ``trace_s = offset + scale * (run_s - first event)``:

- with a marker (the firmware drives a GPIO high at each connection start and each PUBLISH; both instruments log
  digital inputs): the marker's rising edges are matched one to one, in order, with those events and the map is
  their least-squares line. Bound: the largest residual plus one sample (an edge is seen at the first sample after
  it, and the line is used beyond the edges it was fitted to; with half a sample 1 of 120 random synthetic traces
  fell outside it).
- without a marker: the current's own steps at the run's phase boundaries (set-up, handshake, CONNACK, PUBLISH,
  end). A coarse search puts the whole run inside the trace (``start``, the trace's first sample on the run's
  clock as the serial log or a note gives it, with ``start_error_s``, narrows it), then each connection is placed
  alone within ``drift_ppm_bound`` of it, and the map is the line through those places. Bound: the largest
  residual, plus the largest disagreement between placing a connection by the first and by the second half of its
  boundaries (the residuals of three or four places understate the error), plus one sample; with fewer than three
  connections (no residual to judge by) the drift bound over the run's span as well. Checked on random synthetic
  traces (drift +-400 ppm, 2-10 kHz, noise 1-5 mA; tests/unit/energy/test_energy_import.py).

Either way the events are the capture's, which sees a packet one network one-way delay after the device sent
it: the bound is the alignment's to those events, not to the radio's own instants.

Phases of each connection on the run's clock: tcp (SYN -> its TCP set-up done), tls (-> handshake done; empty for
plain MQTT), mqtt (-> CONNACK), publish (``PUBLISH_WINDOW_S`` from each PUBLISH, cut at the next event), idle (the
rest of the connection), between (its end -> the next connection's SYN: sleep, where the board sleeps). Charge
integrates the samples as the instrument reports them, each the mean current over its period.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.analysis.powertrace import Trace
from orchestrator.errors import TestbedError

PUBLISH_WINDOW_S = 0.020
MEASURED_PHASES = ("tcp", "tls", "mqtt", "publish", "idle", "between")
COARSE_STEP_S = 0.001  # the whole-run search's step; each connection is then placed to a tenth of a sample
MAX_DRIFT = 1e-3  # 1000 ppm: a fit further from 1 matched the wrong edges


@dataclass(frozen=True)
class RunConnection:
    """One connection's events, run clock (epoch seconds)."""

    start: float
    tls_start: float
    tls_end: float
    connack: float
    end: float
    publishes: tuple[float, ...]
    kind: str


@dataclass(frozen=True)
class Alignment:
    method: str  # "marker" or "current edges"
    ref: float  # the run's first event (run clock)
    offset: float  # its time on the trace's clock
    scale: float
    bound_s: float
    matched: int  # edges matched (marker) or connections placed (current edges)

    def to_trace(self, run_s: np.ndarray | float) -> np.ndarray:
        return self.offset + self.scale * (np.asarray(run_s, dtype=float) - self.ref)

    def as_dict(self) -> dict[str, object]:
        return {"method": self.method, "trace_s_of_first_event": round(self.offset, 9),
                "drift_ppm": round((self.scale - 1) * 1e6, 3), "error_bound_ms": round(self.bound_s * 1e3, 4),
                "matched": self.matched}


def marks(conns: Sequence[RunConnection]) -> np.ndarray:
    """The events the marker shows: each connection start and each PUBLISH, in time order."""
    return np.sort(np.array([t for c in conns for t in (c.start, *c.publishes)], dtype=float))


def trace_phases(conns: Sequence[RunConnection]) -> list[tuple[str, int, float, float]]:
    """(phase, connection, start, end) on the run's clock; publish windows and idle do not overlap."""
    out: list[tuple[str, int, float, float]] = []
    for i, c in enumerate(conns):
        out += [("tcp", i, c.start, c.tls_start), ("tls", i, c.tls_start, c.tls_end), ("mqtt", i, c.tls_end, c.connack)]
        cursor = c.connack
        pubs = sorted(c.publishes)
        for j, p in enumerate(pubs):
            stop = min(p + PUBLISH_WINDOW_S, pubs[j + 1] if j + 1 < len(pubs) else c.end)
            if p > cursor:
                out.append(("idle", i, cursor, p))
            out.append(("publish", i, max(p, cursor), max(stop, cursor)))
            cursor = max(stop, cursor)
        out.append(("idle", i, cursor, max(c.end, cursor)))
        if i + 1 < len(conns):
            out.append(("between", i, c.end, conns[i + 1].start))
    return out


def _cumulative(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Sample edges and the charge (mC) up to each: sample i is its mean current over [t_i, t_i+1)."""
    t = trace.time_s
    edges = np.append(t, t[-1] + (t[-1] - t[-2]))
    return edges, np.concatenate([[0.0], np.cumsum(trace.current_ma * np.diff(edges))])


def charge(trace: Trace, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """mC between trace times ``start`` and ``stop`` (arrays)."""
    edges, cum = _cumulative(trace)
    return np.interp(stop, edges, cum) - np.interp(start, edges, cum)


def _check_covers(trace: Trace, al: Alignment, conns: Sequence[RunConnection], path: str) -> None:
    first, last = al.to_trace(conns[0].start), al.to_trace(max(c.end for c in conns))
    end = float(trace.time_s[-1])
    if last < 0 or first > end:
        raise TestbedError(f"{path}: the trace does not overlap the run (it spans 0-{end:.3f} s, the run's events "
                           f"fall at {first:.3f}-{last:.3f} s of it)", hint="import the trace recorded during this run")
    if first < 0 or last > end:
        raise TestbedError(f"{path}: the trace covers only part of the run (it spans 0-{end:.3f} s, the run's events "
                           f"need {first:.3f}-{last:.3f} s)", hint="record from before the first connection to after "
                                                                     "the last one ends")


def by_marker(trace: Trace, conns: Sequence[RunConnection], path: str) -> Alignment:
    """The map from the marker's rising edges matched in order with the run's connection starts and PUBLISHes."""
    assert trace.marker is not None
    rising = np.flatnonzero((trace.marker[1:] > 0) & (trace.marker[:-1] == 0)) + 1
    edges = trace.time_s[rising] - trace.period_s / 2
    events = marks(conns)
    if edges.size != events.size:
        raise TestbedError(f"{path}: the marker ({trace.marker_channel}) rises {edges.size} times, the run has "
                           f"{events.size} events ({len(conns)} connection starts and "
                           f"{events.size - len(conns)} PUBLISHes)",
                           hint="record the whole run with the marker wired, or import without the marker "
                                "(--no-marker)")
    ref = float(events[0])
    scale, offset = np.polyfit(events - ref, edges, 1) if events.size > 1 else (1.0, float(edges[0]))
    if abs(scale - 1) > MAX_DRIFT:
        raise TestbedError(f"{path}: the marker's edges do not match the run's events (their spacing differs by "
                           f"{(scale - 1) * 1e6:.0f} ppm)", hint="is this the trace of this run?")
    resid = edges - (offset + scale * (events - ref))
    al = Alignment("marker", ref, float(offset), float(scale),
                   float(np.abs(resid).max()) + trace.period_s, int(edges.size))
    _check_covers(trace, al, conns, path)
    return al


def _boundaries(conns: Sequence[RunConnection]) -> list[tuple[float, float]]:
    """(run time, half-window s) of each phase boundary the current should step at."""
    out: list[tuple[float, float]] = []
    for c in conns:
        points = sorted({c.start, c.tls_start, c.tls_end, c.connack, *c.publishes, c.end})
        for j, x in enumerate(points):
            gaps = [x - points[j - 1] if j else 0.05, points[j + 1] - x if j + 1 < len(points) else 0.05]
            out.append((x, min(max(min(gaps) / 2, 0.0), 0.05)))
    return out


def _score(trace: Trace, bounds: list[tuple[float, float]], ref: float, cands: np.ndarray) -> np.ndarray:
    """Sum over boundaries of |mean current after - mean before| with the run's first event at trace time cands."""
    edges, cum = _cumulative(trace)
    total = np.zeros(cands.size)
    for x, half in bounds:
        if half < 2 * trace.period_s:
            continue
        y = cands + (x - ref)
        before = (np.interp(y, edges, cum) - np.interp(y - half, edges, cum)) / half
        after = (np.interp(y + half, edges, cum) - np.interp(y, edges, cum)) / half
        total += np.abs(after - before)
    return total


def _places(trace: Trace, conns: Sequence[RunConnection], ref: float, local: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, float]:
    """Each connection placed alone by all its boundaries (x: its start on the run's clock from the first event, y:
    on the trace's), and the largest disagreement between placing it by its first and by its second half of
    boundaries: how far one placement can be off, which the fit's residuals alone understate with few connections."""
    x, y, spread = [], [], 0.0
    for c in conns:
        bounds = _boundaries([c])
        halves = [bounds[: len(bounds) // 2], bounds[len(bounds) // 2:]]
        best = float(local[int(np.argmax(_score(trace, bounds, ref, local)))])
        if all(halves):
            a, b = (float(local[int(np.argmax(_score(trace, h, ref, local)))]) for h in halves)
            spread = max(spread, abs(a - b))
        x.append(c.start - ref)
        y.append(best + (c.start - ref))
    return np.array(x), np.array(y), spread


def by_current(trace: Trace, conns: Sequence[RunConnection], path: str, *, start: float | None = None,
               start_error_s: float = 1.0, drift_ppm_bound: float = 500.0) -> Alignment:
    """The map from the current's steps at the run's phase boundaries (no marker)."""
    ref, last = conns[0].start, max(c.end for c in conns)
    span, end, dt = last - ref, float(trace.time_s[-1]), trace.period_s
    lo, hi = 0.0, end - span
    if start is not None:
        lo, hi = max(lo, ref - start - start_error_s), min(hi, ref - start + start_error_s)
    if end < span:
        raise TestbedError(f"{path}: the trace ({end:.3f} s) is shorter than the run's {span:.3f} s of events: it "
                           "cannot cover the run", hint="record from before the first connection to after the last")
    if hi < lo:
        raise TestbedError(f"{path}: the trace does not overlap the run: with its first sample at {start:.3f} +- "
                           f"{start_error_s:g} s on the run's clock it ends before the run's events or starts after "
                           "them", hint="check --start (epoch s of the trace's first sample), or import the trace "
                                        "recorded during this run")
    step = max(dt, COARSE_STEP_S)
    coarse = np.arange(lo, hi + step, step)
    s0 = float(coarse[int(np.argmax(_score(trace, _boundaries(conns), ref, coarse)))])
    width = 2 * step + drift_ppm_bound * 1e-6 * span
    x, y, spread = _places(trace, conns, ref, np.arange(s0 - width, s0 + width + dt / 2, dt / 10))
    if len(conns) >= 3:
        scale, offset = np.polyfit(x, y, 1)
        bound = float(np.abs(y - (offset + scale * x)).max()) + spread + dt
    else:
        scale, offset = 1.0, float(np.mean(y - x))
        bound = float(np.abs(y - x - offset).max()) + spread + dt + drift_ppm_bound * 1e-6 * span
    al = Alignment("current edges", ref, float(offset), float(scale), bound, len(conns))
    _check_covers(trace, al, conns, path)
    return al


def measure_phases(trace: Trace, conns: Sequence[RunConnection], al: Alignment, readings: int) -> dict[str, object]:
    """Charge per phase (summed over connections and per connection) and per reading, from the aligned trace."""
    rows = trace_phases(conns)
    a = al.to_trace(np.array([r[2] for r in rows]))
    b = al.to_trace(np.array([r[3] for r in rows]))
    q = charge(trace, a, b)
    total: dict[str, dict[str, float]] = {p: {"mc": 0.0, "seconds": 0.0} for p in MEASURED_PHASES}
    per_conn: list[dict[str, float]] = [dict.fromkeys(MEASURED_PHASES, 0.0) for _ in conns]
    for (name, i, t0, t1), mc in zip(rows, q, strict=True):
        total[name]["mc"] += float(mc)
        total[name]["seconds"] += t1 - t0
        per_conn[i][name] += float(mc)
    whole = float(charge(trace, al.to_trace(conns[0].start), al.to_trace(max(c.end for c in conns))))
    return {"phases": total, "per_connection": per_conn, "total_mc": whole,
            "per_reading_mc": whole / readings if readings else None, "readings": readings}
