"""The broker's CPU per event (a reading it received, a connection it accepted), from its cgroup's CPU
counter as the engine's stats stream sampled it (resources.json ``broker_cpu_series``: [read time in
epoch seconds, CPU ns since the container started], about one a second).

Windows are the intervals between consecutive samples inside the span of the events; each window's
CPU is divided by the events that fell into it. The figure is the ratio of the sums (CPU over the
windows / events in them) with a 95 % bootstrap interval of that ratio, the windows resampled. The
broker's idle CPU is not subtracted: it is in each window, which is why a fair comparison runs every
mode at the same event rate. The loader's CPU is not in the broker's cgroup (a container of its own, or
a board).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def per_event(series: Sequence[Sequence[float]], events_s: Sequence[float] | np.ndarray, *,
              what: str) -> dict[str, Any]:
    """CPU milliseconds per event over the windows that hold events."""
    t = np.array([row[0] for row in series], dtype=float)
    cpu = np.array([row[1] for row in series], dtype=float)
    ev = np.sort(np.asarray(events_s, dtype=float))
    out: dict[str, Any] = {"event": what, "events": 0, "windows": 0, "cpu_ms_per_event": None,
                           "ci95_low": None, "ci95_high": None}
    if len(t) < 2 or len(ev) == 0:
        out["reason"] = "too few stats samples or no events"
        return out
    counts = np.histogram(ev, bins=t)[0]
    keep = counts > 0
    if not keep.any():
        out["reason"] = "no event fell between two stats samples"
        return out
    d_cpu_ms = np.diff(cpu)[keep] / 1e6
    n = counts[keep]
    ratios = d_cpu_ms / n
    out.update(events=int(n.sum()), windows=int(keep.sum()),
               cpu_ms_per_event=round(float(d_cpu_ms.sum() / n.sum()), 4))
    if len(ratios) >= 3:
        low, high = ratio_interval(d_cpu_ms, n)
        out.update(window_mean=round(float(ratios.mean()), 4), ci95_low=round(low, 4), ci95_high=round(high, 4))
    return out


def ratio_interval(cpu_ms: np.ndarray, events: np.ndarray, resamples: int = 2000) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the ratio of sums, the windows resampled (seeded: the same run gives
    the same interval). A Student t over the windows' own ratios (the first version) went below zero for a
    fleet's connect phase, where a window with one handshake carries a whole second of idle CPU."""
    rng = np.random.default_rng(0)
    pick = rng.integers(0, len(events), size=(resamples, len(events)))
    estimates = cpu_ms[pick].sum(axis=1) / events[pick].sum(axis=1)
    low, high = np.percentile(estimates, [2.5, 97.5])
    return float(low), float(high)
