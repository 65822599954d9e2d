"""The broker's CPU per handshake of each kind from one run (analysis/handshakecost.py), on series made from known
costs: the figures come back within their intervals, and a run that cannot tell the kinds apart says so."""

from __future__ import annotations

import numpy as np

from orchestrator.analysis import handshakecost

IDLE_MS_PER_S, FULL_MS, RESUMED_MS, READING_MS = 2.0, 1.7, 1.1, 0.05


def _series(full: np.ndarray, resumed: np.ndarray, readings: np.ndarray, noise_ms: float,
            seconds: int = 60) -> list[list[float]]:
    """A CPU counter sampled about once a second (jittered), the events' costs and the idle CPU in it, plus noise."""
    rng = np.random.default_rng(3)
    t = np.sort(np.r_[0.0, np.arange(1, seconds) + rng.uniform(-0.05, 0.05, seconds - 1), float(seconds)])
    ns = [0.0]
    for a, b in zip(t[:-1], t[1:], strict=True):
        def n(ev: np.ndarray, a: float = a, b: float = b) -> int:
            return int(((ev >= a) & (ev < b)).sum())

        spent = (IDLE_MS_PER_S * (b - a) + FULL_MS * n(full) + RESUMED_MS * n(resumed) + READING_MS * n(readings)
                 + rng.normal(0, noise_ms))
        ns.append(ns[-1] + spent * 1e6)
    return [[float(a), float(c)] for a, c in zip(t, ns, strict=True)]


def test_each_kind_is_recovered_within_its_interval() -> None:
    rng = np.random.default_rng(1)
    full, resumed, readings = rng.uniform(0, 25, 400), rng.uniform(5, 60, 1200), rng.uniform(0, 60, 6000)
    out = handshakecost.per_kind(_series(full, resumed, readings, noise_ms=3.0),
                                 {"full": full, "resumed-ticket": resumed}, readings)
    assert out["windows"] >= 55
    for kind, cost, n in (("full", FULL_MS, 400), ("resumed-ticket", RESUMED_MS, 1200)):
        fig = out["handshakes"][kind]
        assert fig["events"] == n and fig["ci95_low"] <= cost <= fig["ci95_high"], (kind, fig)
        assert fig["ci95_high"] - fig["ci95_low"] < 0.5
    assert out["per_reading"]["events"] == 6000
    assert out["per_reading"]["ci95_low"] <= READING_MS <= out["per_reading"]["ci95_high"]
    assert out["idle_ms_per_s"]["ci95_low"] <= IDLE_MS_PER_S <= out["idle_ms_per_s"]["ci95_high"]


def test_too_few_events_or_windows_say_why() -> None:
    rng = np.random.default_rng(2)
    readings = rng.uniform(0, 3, 50)
    series = _series(np.array([0.5, 1.5]), rng.uniform(0, 3, 40), readings, noise_ms=0.0, seconds=3)
    out = handshakecost.per_kind(series, {"full": [0.5, 1.5], "resumed-id": rng.uniform(0, 3, 40)}, readings)
    assert out["handshakes"] == {"full": None, "resumed-id": None}
    assert "stats windows cannot separate" in out["reason"] and out["skipped"] == {"full": "only 2 handshake(s) of "
                                                                                    "this kind"}
    assert handshakecost.per_kind([], {"full": [1, 2, 3]}, [])["reason"].startswith("no handshake kind")
