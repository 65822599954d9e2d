"""connections.csv's handshake split (analysis/handshake_split.py) on real captures: TLS 1.2 full (our device on
mbedTLS 2.28 and 3.6; Python's OpenSSL client), TLS 1.2 resumed by ID and by ticket, TLS 1.3 full and PSK-resumed
(our device on 3.6; OpenSSL). The parts add up to the span on the capture's clock; keys change nothing; delays
planted in a capture (its frames' times edited, every later frame shifted with them, as a delay at that point would)
land in their part.

Bounds: the sum is exact up to float rounding (1e-6 ms over a span of milliseconds). A pause of X planted before the
device's answer to a broker flight adds X to the device part exactly when that turn's gap already held TCP's round
trip (every turn of these captures does; checked), and nothing to the others. A pause before the broker's answer
adds X to the broker part exactly. A path delay of d each way adds 2d to every turn and to TCP's round trip (the
SYN/ACK -> ACK is itself a turn): the network part grows by 2d per turn, the device and broker parts not at all.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import lifecycle
from orchestrator.analysis.connections import connection_frames, connections_from_frames, connections_table
from orchestrator.analysis.handshake_split import SYN
from orchestrator.backends.tshark import export_chunks

FIX = Path(__file__).resolve().parents[2] / "fixtures"
T13, T12, CONN = FIX / "analysis" / "tls13_mbedtls36", FIX / "analysis" / "tls12_device_stacks", FIX / "connections"
# (capture, broker port, key logs, the handshakes it holds in order)
CASES = (
    (T13 / "tls13_reconnect.pcapng", 56893, (T13 / "reconnect" / "keys.log",), ["full"] * 3),
    (T13 / "tls13_resume_ticket.pcapng", 56893, (T13 / "resume" / "keys.log",), ["full"] + ["resumed-psk"] * 2),
    (T12 / "tls12_mbedtls228.pcapng", 39231, tuple(T12 / "mbedtls228" / p / "keys.log" for p in ("p65", "p100")),
     ["full"] * 2),
    (T12 / "tls12_mbedtls36.pcapng", 39231, tuple(T12 / "mbedtls36" / p / "keys.log" for p in ("p65", "p100")),
     ["full"] * 2),
    (CONN / "t12_session_id.pcapng", 18883, (CONN / "t12_session_id.keys.log",), ["full"] + ["resumed-id"] * 2
     + ["full"]),
    (CONN / "t12_ticket.pcapng", 18883, (CONN / "t12_ticket.keys.log",), ["full"] + ["resumed-ticket"] * 2),
    (CONN / "t13_psk.pcap", 18884, (CONN / "t13_psk.keys.log",), ["full"] + ["resumed-psk"] * 2),
)
IDS = [c[0].name for c in CASES]
PARTS = ("split_device_ms", "split_broker_ms", "split_network_ms", "split_held_ms")


def _split(table: pd.DataFrame) -> pd.DataFrame:
    return table[["split_span_ms", *PARTS, "split_rtt_ms", "split_turns"]].astype(float)


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_the_parts_add_up_to_first_syn_to_connack(case: int) -> None:
    table = _table(case)
    assert list(table["handshake"]) == CASES[case][3]
    split = _split(table)
    assert split["split_span_ms"].to_numpy() == pytest.approx(
        ((table["connack_time"] - table["syn_time"]) * 1000).to_numpy(), abs=1e-3)
    assert split[list(PARTS)].sum(axis=1).to_numpy() == pytest.approx(split["split_span_ms"].to_numpy(), abs=1e-3)
    assert (split[list(PARTS)] >= 0).all().all() and (split["split_rtt_ms"] > 0).all()
    assert (split["split_device_ms"] > 0).all() and (split["split_broker_ms"] > 0).all()
    # the device answers the SYN/ACK, the broker's first flight and (TLS 1.2 full) its second: one turn each at
    # least (a client record that crossed a NewSessionTicket, or an ACK that released a held CONNACK, adds one)
    trips = table["handshake_round_trips"].to_numpy()
    assert (split["split_turns"].to_numpy() >= 1 + trips).all()


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_keys_change_nothing_but_a_tls13_end(case: int) -> None:
    """The parts need no keys; only the span's end does in TLS 1.3 (CONNACK and NewSessionTicket are both
    application-data records there): without keys TLS 1.2 ends at the broker's first application-data record after
    the client's, the same frame, and TLS 1.3 has no split."""
    keyed, blind = _table(case), _table(case, keys=False)
    assert set(keyed["split_end_from"]) == {"CONNACK"}
    if set(keyed["tls_version"]) == {"TLS 1.3"}:
        assert blind["split_span_ms"].isna().all() and blind["split_end_from"].isna().all()
        return
    assert set(blind["split_end_from"]) == {"the broker's first application-data record after the client's (no keys)"}
    pd.testing.assert_frame_equal(_split(keyed), _split(blind))


@cache
def _exported(case: int, keys: bool) -> pd.DataFrame:
    pcap, port, keylogs, _ = CASES[case]
    return connection_frames(pcap, port, True, keylogs if keys else (), export_chunks)


def _table(case: int, keys: bool = True) -> pd.DataFrame:
    return connections_from_frames(_exported(case, keys).copy(), CASES[case][1], True)


def _frames(case: int) -> tuple[pd.DataFrame, int]:
    return _exported(case, True).copy(), CASES[case][1]


def _events(pk: pd.DataFrame, port: int) -> pd.DataFrame:
    """The frames that move the exchange on: SYN-flagged or carrying payload."""
    return pk[((pk["tcp_flags"] & SYN) != 0) | (pk["tcp_len"].fillna(0) > 0)]


def _shift_from(frames: pd.DataFrame, frame: int, seconds: float) -> pd.DataFrame:
    """A pause of ``seconds`` at ``frame``: it and every later frame move."""
    out = frames.copy()
    out.loc[out["frame"] >= frame, "time"] += seconds
    return out


def _answer(frames: pd.DataFrame, port: int, stream: int, by_client: bool, nth: int) -> int:
    """The frame number of the ``nth`` (0-based) event of ``stream`` sent by that side right after one of the other
    side's events, from the ClientHello on (TCP's own exchange left out)."""
    pk = _events(frames[frames["stream"] == stream], port)
    pk = pk[pk["tcp_len"].fillna(0) > 0]
    client = (pk["dst_port"] == port).to_numpy()
    hits = [int(f) for i, f in enumerate(pk["frame"]) if i and client[i] == by_client and client[i - 1] != by_client]
    return hits[nth]


# (case, stream): TLS 1.2 full and TLS 1.3 full of our device, TLS 1.2 resumed by ticket and TLS 1.3 by PSK
PLANTED = [(0, 0), (1, 1), (3, 0), (5, 1), (6, 2)]


@pytest.mark.parametrize(("case", "stream"), PLANTED, ids=[f"{IDS[c]}-{s}" for c, s in PLANTED])
def test_a_pause_before_the_devices_next_flight_lands_in_the_device(case: int, stream: int) -> None:
    frames, port = _frames(case)
    before = _split(connections_from_frames(frames, port, True)).iloc[stream]
    planted = _shift_from(frames, _answer(frames, port, stream, True, 0), 0.025)
    after = _split(connections_from_frames(planted, port, True)).iloc[stream]
    assert after["split_device_ms"] - before["split_device_ms"] == pytest.approx(25.0, abs=1e-3)
    for col in ("split_broker_ms", "split_network_ms", "split_rtt_ms"):
        assert after[col] == pytest.approx(before[col], abs=1e-3), col


@pytest.mark.parametrize(("case", "stream"), PLANTED, ids=[f"{IDS[c]}-{s}" for c, s in PLANTED])
def test_a_pause_before_the_brokers_next_flight_lands_in_the_broker(case: int, stream: int) -> None:
    frames, port = _frames(case)
    before = _split(connections_from_frames(frames, port, True)).iloc[stream]
    planted = _shift_from(frames, _answer(frames, port, stream, False, 0), 0.040)
    after = _split(connections_from_frames(planted, port, True)).iloc[stream]
    assert after["split_broker_ms"] - before["split_broker_ms"] == pytest.approx(40.0, abs=1e-3)
    for col in ("split_device_ms", "split_network_ms", "split_rtt_ms"):
        assert after[col] == pytest.approx(before[col], abs=1e-3), col


def _path_delay(frames: pd.DataFrame, port: int, stream: int, seconds: float) -> pd.DataFrame:
    """``stream`` as it would be captured with ``seconds`` more on the path each way beyond the capture point: every
    client frame sent in answer to a broker frame (after the broker's latest frame) comes 2 x seconds later, and so
    does everything after it."""
    out = frames.copy()
    pk = out[out["stream"] == stream]
    client = (pk["dst_port"] == port).to_numpy()
    shift, last_was_server, times = 0.0, False, []  # a client ACK after a broker frame answers it too
    for t, c, flags, length in zip(pk["time"], client, pk["tcp_flags"], pk["tcp_len"].fillna(0), strict=True):
        event = bool(flags & SYN) or length > 0 or (c and last_was_server)
        if c and last_was_server and event:
            shift += 2 * seconds
        times.append(t + shift)
        if event:
            last_was_server = not c
    out.loc[pk.index, "time"] = times
    return out.sort_values("time", kind="stable")


@pytest.mark.parametrize(("case", "stream"), PLANTED, ids=[f"{IDS[c]}-{s}" for c, s in PLANTED])
def test_a_longer_path_lands_in_the_network(case: int, stream: int) -> None:
    frames, port = _frames(case)
    before = _split(connections_from_frames(frames, port, True)).iloc[stream]
    after = _split(connections_from_frames(_path_delay(frames, port, stream, 0.010), port, True)).iloc[stream]
    assert after["split_rtt_ms"] - before["split_rtt_ms"] == pytest.approx(20.0, abs=1e-3)
    assert after["split_turns"] == before["split_turns"]
    assert after["split_network_ms"] - before["split_network_ms"] == pytest.approx(20.0 * before["split_turns"],
                                                                                 abs=1e-3)
    for col in ("split_device_ms", "split_broker_ms"):
        assert after[col] == pytest.approx(before[col], abs=1e-3), col


def test_no_connack_no_split() -> None:
    table = connections_table(CONN / "plain.pcapng", 11883, False, (), export_chunks)
    assert np.isfinite(table["split_span_ms"].astype(float)).all()  # plain MQTT splits too: TCP and MQTT only
    frames, port = _frames(len(CASES) - 1)
    cut = frames[~((frames["stream"] == 0) & (frames["frame"] >= _answer(frames, port, 0, False, 0)))]
    row = connections_from_frames(cut, port, True).iloc[0]
    assert pd.isna(row["split_span_ms"]) and pd.isna(row["split_device_ms"])


def test_a_connack_held_for_the_devices_delayed_ack_is_told_apart() -> None:
    """Our device on TLS 1.3 (tls13_reconnect.pcapng, stream 0): the broker sends its second NewSessionTicket, reads
    CONNECT, and its CONNACK leaves only 19 us after the device's ACK that came 40 ms later (Linux's delayed ACK;
    Mosquitto's Nagle holds the small segment while the ticket is unacknowledged): held, not broker."""
    row = _split(_table(0)).iloc[0]
    assert 39.0 < row["split_held_ms"] < 41.0
    assert row["split_broker_ms"] < 1.0


def test_metrics_give_each_parts_median_per_kind() -> None:
    rows = _table(1)  # TLS 1.3 on our 3.6 device: full, then two PSK-resumed
    block = lifecycle.lifecycle(rows, [], mode="resume-ticket", per_connection=2, close="disconnect", expected=3,
                                readings=6, tls=True)
    psk = rows[rows["handshake"] == "resumed-psk"]
    for col in ("split_device_ms", "split_broker_ms", "split_network_ms", "split_held_ms", "split_span_ms"):
        assert block["by_kind"]["resumed-psk"][f"{col}_median"] == pytest.approx(psk[col].median(), abs=1e-3)
    assert block["by_kind"]["full"]["split_held_ms_median"] > 39.0
