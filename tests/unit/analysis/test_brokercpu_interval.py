"""The broker's CPU per event: the interval is of the figure itself (the ratio of sums), never below zero."""

from __future__ import annotations

from orchestrator.analysis import brokercpu


def _series(cpu_ms_per_window: list[float]) -> list[list[float]]:
    total, rows = 0.0, [[0.0, 0.0]]
    for i, ms in enumerate(cpu_ms_per_window, start=1):
        total += ms * 1e6
        rows.append([float(i), total])
    return rows


def test_a_connect_phase_with_a_lonely_handshake_gets_a_positive_interval_around_the_ratio() -> None:
    # a fleet's connect phase: 1 s windows with 10 ms of idle CPU each, 2 ms per handshake; one window holds
    # a single late handshake (its ratio 12 ms), the others 50 (2.2 ms each): a t interval over the windows'
    # own ratios went below zero here; the ratio of sums is (6 x 110 + 12) / 301 = 2.233 ms
    counts = [50, 50, 50, 1, 50, 50, 50]
    events = [w + (k + 0.5) / n for w, n in enumerate(counts) for k in range(n)]
    out = brokercpu.per_event(_series([10 + 2 * n for n in counts]), events, what="handshake")
    assert out["events"] == 301 and out["windows"] == 7
    assert out["cpu_ms_per_event"] == round((6 * 110 + 12) / 301, 4)
    assert 0 < out["ci95_low"] <= out["cpu_ms_per_event"] <= out["ci95_high"] < 2.5, out
    assert out == brokercpu.per_event(_series([10 + 2 * n for n in counts]), events, what="handshake")  # seeded
