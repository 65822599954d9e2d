"""The broker's CPU per TLS handshake of each kind the wire shows (full, resumed-id, resumed-ticket, resumed-psk)
and per reading, from ONE run whose devices reconnect (issue 27): the broker's CPU series (resources.json,
[epoch s, CPU ns], about one sample a second) and the times of the events (each connection's SYN with its
kind from connections.csv, each reading's arrival at the broker).

Windows are the intervals between consecutive samples from the first event to the last. A window's CPU is
modelled as the sum of its events' costs plus the broker's idle CPU, which grows with the window's length:

    cpu_ms = idle_ms_per_s * seconds + sum over kinds of (ms per handshake of that kind x its handshakes)
             + ms per reading x readings

solved by least squares over the windows (nothing is subtracted beforehand, and nothing is forced to be
positive: a figure whose interval spans zero says the run cannot tell that cost apart). The 95 % interval of
each figure is a percentile bootstrap with the windows resampled (seeded: the same run gives the same
interval). A kind with fewer events than ``MIN_EVENTS``, or a run with too few windows for the unknowns, gets
no figure and says why. Readings and handshakes overlap in time (every connection carries its K readings), so
the figures are separated by how their counts vary between windows; a run whose kinds all happen at the same
moments cannot separate them, which the intervals show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MIN_EVENTS = 3
RESAMPLES = 1000


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, y, rcond=None)[0]


def _design(edges: np.ndarray, events: Sequence[np.ndarray]) -> np.ndarray:
    """One row per window: its length (s), then each event list's count in it."""
    return np.column_stack([np.diff(edges), *(np.histogram(ev, bins=edges)[0] for ev in events)]).astype(float)


def _intervals(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    fits = []
    for _ in range(RESAMPLES):
        pick = rng.integers(0, len(y), size=len(y))
        if np.linalg.matrix_rank(x[pick]) == x.shape[1]:
            fits.append(_fit(x[pick], y[pick]))
    arr = np.array(fits) if fits else np.full((1, x.shape[1]), np.nan)
    return np.percentile(arr, 2.5, axis=0), np.percentile(arr, 97.5, axis=0)


def _figure(value: float, low: float, high: float, events: int) -> dict[str, Any]:
    return {"events": events, "cpu_ms_per_event": round(float(value), 4), "ci95_low": round(float(low), 4),
            "ci95_high": round(float(high), 4)}


def per_kind(series: Sequence[Sequence[float]], handshakes: Mapping[str, Sequence[float] | np.ndarray],
             readings_s: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """CPU ms per handshake of each kind and per reading, with the broker's idle CPU per second, from one run."""
    kinds = {k: np.sort(np.asarray(v, dtype=float)) for k, v in sorted(handshakes.items())}
    out: dict[str, Any] = {"method": "least squares over the stats windows, 95 % bootstrap over windows",
                           "handshakes": {k: None for k in kinds}, "per_reading": None, "idle_ms_per_s": None}
    skipped = {k: f"only {v.size} handshake(s) of this kind" for k, v in kinds.items() if v.size < MIN_EVENTS}
    used = {k: v for k, v in kinds.items() if k not in skipped}
    readings = np.sort(np.asarray(readings_s, dtype=float))
    every = np.concatenate([*used.values(), readings]) if used or readings.size else np.empty(0)
    t = np.array([float(r[0]) for r in series], dtype=float)
    cpu_ms = np.array([float(r[1]) for r in series], dtype=float) / 1e6
    if not used or t.size < 2 or not every.size:
        out["reason"] = "no handshake kind with enough events, or too few stats samples"
        out["skipped"] = skipped
        return out
    lo = max(int(np.searchsorted(t, every.min(), side="right")) - 1, 0)
    hi = min(int(np.searchsorted(t, every.max(), side="left")), t.size - 1)
    edges, spent = t[lo:hi + 1], np.diff(cpu_ms[lo:hi + 1])
    lists = [*used.values(), readings]
    x = _design(edges, lists) if edges.size >= 2 else np.empty((0, len(lists) + 1))
    out["windows"] = int(x.shape[0])
    if x.shape[0] < x.shape[1] + 2 or np.linalg.matrix_rank(x) < x.shape[1]:
        out["reason"] = (f"{x.shape[0]} stats windows cannot separate {x.shape[1]} unknowns (idle, "
                         f"{', '.join(used)}, readings)")
        out["skipped"] = skipped
        return out
    coef = _fit(x, spent)
    low, high = _intervals(x, spent)
    out["idle_ms_per_s"] = _figure(coef[0], low[0], high[0], 0) | {"events": None}
    for i, (kind, ev) in enumerate(used.items(), start=1):
        out["handshakes"][kind] = _figure(coef[i], low[i], high[i], int(ev.size))
    out["per_reading"] = _figure(coef[-1], low[-1], high[-1], int(readings.size))
    if skipped:
        out["skipped"] = skipped
    return out
