"""The judgements of `testbed board check` on what a board's run recorded (publisher_summary.json, metrics.json),
for the figures board-emu cannot produce (its heap and RSSI are constants): a heap or a signal below the floor, a
run without clock mapping. The whole check against board-emu: tests/firmware/test_board_check.py (before the lab)
and tests/integration/test_board_check.py (through it)."""

from __future__ import annotations

from orchestrator.publishers.board.check import (
    HEAP_FLOOR_BYTES,
    RSSI_FLOOR_DBM,
    BoardCheck,
    clock_step,
    heap_step,
    phases_step,
    rssi_step,
)


def _one(step, *args) -> tuple[str, str]:  # noqa: ANN001
    check = BoardCheck()
    step(check, *args)
    [got] = check.steps
    return got.verdict, got.seen


def test_a_heap_below_the_floor_during_the_handshake_fails() -> None:
    low = HEAP_FLOOR_BYTES - 1
    verdict, seen = _one(heap_step, {"heap": {"min_during_handshake": low, "min_during_run": 90_000}})
    assert verdict == "FAIL" and seen.startswith(f"{low} B free at least during the handshake, 90000 B free at least")
    assert f"below {HEAP_FLOOR_BYTES} B" in seen
    assert _one(heap_step, {"heap": {"min_during_handshake": HEAP_FLOOR_BYTES, "min_during_run": None}})[0] == "ok"
    assert _one(heap_step, {}) == ("FAIL", "the board reported no heap figures")


def test_a_weak_signal_fails_and_names_the_floor() -> None:
    verdict, seen = _one(rssi_step, {"rssi_dbm": {"min": RSSI_FLOOR_DBM - 1, "max": -60}})
    assert verdict == "FAIL" and seen.startswith(f"{RSSI_FLOOR_DBM - 1} .. -60 dBm: weaker than {RSSI_FLOOR_DBM} dBm")
    assert _one(rssi_step, {"rssi_dbm": {"min": RSSI_FLOOR_DBM, "max": RSSI_FLOOR_DBM}}) == (
        "ok", f"{RSSI_FLOOR_DBM} .. {RSSI_FLOOR_DBM} dBm")


def test_a_run_without_clock_mapping_fails_with_the_reason() -> None:
    reason = "no clock samples before the cell (got 0 of 8)"
    verdict, seen = _one(clock_step, {"clock": {"available": False, "reason": reason}}, {})
    assert verdict == "FAIL" and seen.startswith(f"no clock mapping: {reason} (do the board's UDP datagrams reach")
    clock = {"available": True, "pre": {"offset_us": 1500.0}, "bound_us": 800.0, "drift_ppm": 3.25,
             "one_way_delay": {"available": True}}
    assert _one(clock_step, {"clock": clock}, {}) == (
        "ok", "offset +1.500 ms, bound +-0.800 ms, drift +3.2 ppm; one-way delay reported")


def test_the_phases_are_shown_never_failed_and_a_whole_handshake_is_said() -> None:
    phases = {"hello_sent_ms": 2.0, "flight_in_ms": 400.0, "verified_ms": 210.0, "kex_done_ms": 700.0,
              "finished_sent_ms": 760.0, "device_busy_ms": 1100.0}
    tls = {"transport": "tls", "handshake_ms": 1210.0, "cpu_model": "esp32 at 240 MHz"}
    assert _one(phases_step, {**tls, "handshake_phases": phases}) == (
        "ok", "hello 2.0, certificate verified 210.0, server flight read 400.0, key exchange 700.0, Finished 760.0 ms "
        "into a 1210.0 ms handshake; busy 1100.0 ms (esp32 at 240 MHz's clock)")
    whole = _one(phases_step, {**tls, "handshake_phases": dict.fromkeys(phases)})
    assert whole == ("ok", "the whole handshake only, 1210.0 ms: its TLS runs inside Arduino's WiFiClientSecure, "
                           "which gives no steps")
    assert _one(phases_step, tls)[1].startswith("the firmware reports no handshake phases")
    assert _one(phases_step, {"transport": "plain"}) == ("ok", "plain MQTT: no TLS handshake")
