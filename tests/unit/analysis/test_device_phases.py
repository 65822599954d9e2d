"""The device's own handshake phases against the wire's split (orchestrator/analysis/device_phases.py), from
connection tables: the wire's rows as analysis/connections.py makes them, the device's connections log as vdevice
(host/src/common/connection_log.cpp) and the board's records (publishers/board/records.py) write it."""

from __future__ import annotations

import io
import types

import pandas as pd
import pytest

from orchestrator.analysis import device_phases, lifecycle
from orchestrator.publishers.board.lines import Conn, Handshake, parse_line
from orchestrator.publishers.board.records import append_connection

HEADER = ("conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error,"
          "hello_sent_ms,flight_in_ms,verified_ms,kex_done_ms,finished_sent_ms,device_busy_ms")
LOG = HEADER + """
0,1,0.100,12.000,0.150,0,1,disconnect,,0.060,8.000,4.700,11.000,11.300,10.000
1,2,0.050,1.500,0.140,1,1,disconnect,,0.050,0.900,,,1.100,0.400
2,3,0.060,1.400,0.130,1,1,disconnect,,0.050,0.800,,,1.000,0.300
"""


def _wire() -> pd.DataFrame:
    return pd.DataFrame({"handshake": ["full", "resumed-ticket", "resumed-ticket"],
                         "tcp_connect_ms": [0.040, 0.040, 0.040], "split_device_ms": [10.080, 0.420, 1.300],
                         "split_turns": [3, 2, 2], "split_rtt_ms": [0.020, 0.020, 0.020]})


def _joined(log: str = LOG) -> tuple[pd.DataFrame, pd.DataFrame]:
    claims = pd.read_csv(io.StringIO(log))
    rows, mismatches = lifecycle.with_claims(_wire(), claims)
    assert mismatches == []
    return rows, claims


def test_each_connection_gets_its_phases_its_difference_and_its_bound() -> None:
    rows, _ = _joined()
    assert list(rows["kex_done_ms"].isna()) == [False, True, True]
    assert rows["device_vs_wire_ms"].round(3).tolist() == [-0.08, -0.02, -1.0]
    # wake-up: the device's TCP connect (0.100) less the wire's (0.040) = 0.060 ms; 3 turns x (0.020 + 0.060) + 6 us
    assert rows.loc[0, "device_wake_ms"] == pytest.approx(0.060)
    assert rows.loc[0, "device_wire_bound_ms"] == pytest.approx(3 * 0.080 + 6 * 0.001)
    assert rows.loc[1, "device_wire_bound_ms"] == pytest.approx(2 * 0.030 + 4 * 0.001)


def test_the_block_gives_medians_per_kind_and_warns_beyond_the_bound() -> None:
    rows, claims = _joined()
    block = device_phases.phases_block(rows, claims, "host CPU X (virtual device)", tls=True)
    assert block is not None and block["available"] and block["clock"] == "host CPU X (virtual device)"
    full, resumed = block["by_kind"]["full"], block["by_kind"]["resumed-ticket"]
    assert (full["compared"], full["device_busy_ms_median"], full["split_device_ms_median"]) == (1, 10.0, 10.08)
    assert (full["beyond_bound"], resumed["beyond_bound"]) == (0, 1)  # the third: 1 ms apart, bound 0.064 ms
    assert resumed["abs_device_vs_wire_ms_max"] == 1.0 and resumed["verified_ms_median"] is None
    [warning] = device_phases.phase_warnings(block)
    assert warning.startswith("resumed-ticket handshakes: the device's own busy time and the wire's device time "
                              "disagree beyond the bound in 1 of 2 connections (|device - wire| up to 1.0 ms")


def test_a_log_without_phases_or_with_the_whole_handshake_only_is_said_never_compared() -> None:
    old = "\n".join(",".join(line.split(",")[:9]) for line in LOG.splitlines()) + "\n"
    rows, claims = _joined(old)
    assert "device_vs_wire_ms" not in rows
    assert device_phases.phases_block(rows, claims, None, tls=True) == {
        "available": False, "reason": device_phases.NO_PHASES, "clock": None}
    whole = LOG.splitlines()[0] + "\n" + "0,1,,1234.000,20.000,0,1,disconnect,,,,,,,\n"
    rows, claims = _joined(whole)
    block = device_phases.phases_block(rows, claims, "board ESP32 at 240 MHz", tls=True)
    assert block is not None and block["reason"] == device_phases.WHOLE_ONLY
    assert device_phases.phases_block(rows, claims, None, tls=False) is None
    assert device_phases.phase_warnings(block) == []


def test_the_clock_label_names_the_host_cpu_or_the_board() -> None:
    assert device_phases.clock_label({"simulated": True, "cpu_model": "AMD EPYC 7B13"}) == \
        "host CPU AMD EPYC 7B13 (virtual device)"
    assert device_phases.clock_label({"simulated": False, "cpu_model": "ESP32 at 240 MHz"}) == "board ESP32 at 240 MHz"
    assert device_phases.clock_label({"simulated": True}) is None


def test_the_boards_conn_and_handshake_lines_carry_the_phases_into_its_connections_log(tmp_path) -> None:  # noqa: ANN001
    conn = parse_line("CONN i=0 tcp_ms=3.100 tls_ms=1210.000 connack_ms=30.000 resumed=0 msgs=1 close=disconnect "
                      "hello_ms=2.000 flight_ms=400.000 verified_ms=210.000 kex_ms=700.000 finished_ms=760.000 "
                      "busy_ms=1100.000")
    assert isinstance(conn, Conn) and conn.phases is not None
    assert conn.phases["kex_done_ms"] == 700.0 and conn.phases["device_busy_ms"] == 1100.0
    old = parse_line("CONN i=1 tcp_ms=3.1 tls_ms=1210.0 connack_ms=30.0 resumed=0 msgs=1 close=disconnect")
    assert isinstance(old, Conn) and old.phases is None  # a board built before them
    shake = parse_line("HANDSHAKE tcp_ms=3.1 tls_ms=1210.0 connack_ms=30.0 version=TLSv1.2 suite=X min_heap=1 "
                       "heap_before=2 hello_ms=- flight_ms=- verified_ms=- kex_ms=- finished_ms=- busy_ms=-")
    assert isinstance(shake, Handshake) and shake.phases == dict.fromkeys(device_phases.PHASES)
    lay = types.SimpleNamespace(publisher_connections=tmp_path / "publisher_connections.csv")
    append_connection(lay, conn)  # type: ignore[arg-type]
    append_connection(lay, old)  # type: ignore[arg-type]
    log = pd.read_csv(lay.publisher_connections)
    assert list(log.columns[-6:]) == list(device_phases.PHASES)
    assert log.loc[0, "verified_ms"] == 210.0 and log.loc[1, ["hello_sent_ms", "device_busy_ms"]].isna().all()
