"""The broker's CPU per event (a reading it received, a connection it accepted), from its cgroup's CPU
counter as the engine's stats stream sampled it (resources.json ``broker_cpu_series``: [read time in
epoch seconds, CPU ns since the container started], about one a second).

Windows are the intervals between consecutive samples inside the span of the events; each window's
CPU is divided by the events that fell into it. The figure is the ratio of the sums (CPU over the
windows / events in them) with a 95 % interval from the spread of the windows' own ratios (Student t
over the windows, each weighted equally). The broker's idle CPU is not subtracted: it is in each
window, which is why a fair comparison runs every mode at the same event rate. The loader's CPU is
not in the broker's cgroup (a container of its own, or a board).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps


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
        half = float(sps.t.ppf(0.975, len(ratios) - 1) * ratios.std(ddof=1) / math.sqrt(len(ratios)))
        mean = float(ratios.mean())
        out.update(window_mean=round(mean, 4), ci95_low=round(mean - half, 4), ci95_high=round(mean + half, 4))
    return out
