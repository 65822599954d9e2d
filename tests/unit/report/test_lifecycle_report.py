"""The report's cost model of a reconnecting sensor (report/lifecycle.py): F/K + m from two cells."""

from __future__ import annotations

from orchestrator.report.lifecycle import Cost, _mode_and_devices, _model, break_even


def test_fixed_and_per_reading_bytes_are_solved_from_a_persistent_and_a_reconnect_cell() -> None:
    fixed, m = 2400.0, 150.0
    persistent = (fixed + 200 * m, 1, 200)  # one connection, 200 readings
    reconnect = (200 * (fixed + m), 200, 200)  # 200 connections of one reading
    assert _model(persistent, reconnect) == (fixed, m)
    batched = (20 * (fixed + 10 * m), 20, 200)  # K = 10
    assert _model(persistent, batched) == (fixed, m)
    assert _model((fixed + m, 1, 1), reconnect) is None  # no second equation


def test_a_fleets_model_is_solved_among_its_own_size() -> None:
    """Issue 27: a fleet of D devices, its persistent cell one connection per device (W_p / D = F + (N_p / D) m)."""
    fixed, m, devices = 2400.0, 150.0, 20
    persistent = (devices * (fixed + 12 * m), devices, devices * 12)
    reconnect = (devices * 4 * (fixed + 3 * m), devices * 4, devices * 12)  # 4 connections of K = 3 per device
    assert _model(persistent, reconnect) == (fixed, m)
    assert _mode_and_devices("reconnect + 20 devices") == ("reconnect", 20)
    assert _mode_and_devices("20 devices") == ("persistent", 20)
    assert _mode_and_devices("resume-id") == ("resume-id", 1)


def test_break_even_is_the_first_k_at_or_below_plain_reconnecting_per_reading() -> None:
    plain = Cost(65, "none", "plain", "plain", fixed=600.0, per_reading=130.0)  # 730 B per reading at K=1
    full = Cost(65, "none", "tls", "full handshake", fixed=2400.0, per_reading=170.0)
    k = int(break_even(full, plain))
    assert full.at(k) <= plain.at(1) < full.at(k - 1)
    assert break_even(Cost(65, "none", "tls", "x", 10.0, 800.0), plain).startswith("never")
    assert break_even(plain, plain) == "n/a"
