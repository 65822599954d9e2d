"""The broker's CPU per event from the stats stream's samples (analysis/brokercpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.analysis.brokercpu import per_event


def test_cpu_per_event_is_the_ratio_of_sums_with_an_interval_that_holds_the_truth() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(0.0, 31.0)  # a sample a second
    per_event_ms, rate = 2.0, 50
    events = np.sort(rng.uniform(0, 30, 30 * rate))
    counts = np.histogram(events, bins=t)[0]
    cpu = np.concatenate([[5e9], 5e9 + np.cumsum(counts * per_event_ms * 1e6 + rng.normal(0, 2e6, len(counts)))])
    out = per_event([[a, b] for a, b in zip(t, cpu, strict=True)], events, what="connection")
    assert out["events"] == len(events) and out["windows"] == 30
    assert out["cpu_ms_per_event"] == pytest.approx(per_event_ms, rel=0.02)
    assert out["ci95_low"] < per_event_ms < out["ci95_high"]


def test_without_events_or_samples_it_says_why() -> None:
    assert per_event([[0, 0]], [0.5], what="reading")["reason"] == "too few stats samples or no events"
    assert per_event([[0, 0], [1, 5]], [3.0], what="reading")["reason"] == "no event fell between two stats samples"
