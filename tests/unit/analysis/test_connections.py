"""The per-connection table (analysis/connections.py, tshark's fields) against the independent reader
(analysis/tlswire.py, the capture's bytes) and the recorded ground truth (tests/fixtures/connections/)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis.connections import connections_table
from orchestrator.analysis.tlswire import wire_connections
from orchestrator.backends.tshark import export_chunks

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "connections"
CASES = sorted(p.stem for p in FIX.glob("*.json"))
COMPARED = ("client_port", "tls_version", "cipher_suite_id", "handshake", "evidence", "tcp_end",
            "payload_client_to_server", "payload_server_to_client", "retransmitted_client_to_server",
            "retransmitted_server_to_client", "wire_client_to_server", "wire_server_to_client")


def _truth(case: str) -> dict:
    return json.loads((FIX / f"{case}.json").read_text())


def _tables(case: str, *, keys: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    t = _truth(case)
    keylogs = (FIX / t["keylog"],) if keys and t["keylog"] else ()
    table = connections_table(FIX / t["pcap"], t["broker_port"], t["tls"], keylogs, export_chunks)
    wire = pd.DataFrame([vars(r) for r in wire_connections(FIX / t["pcap"], t["broker_port"], t["tls"])])
    return table, wire, t


def test_the_fixtures_cover_every_kind_and_ending() -> None:
    conns = [c for case in CASES for c in _truth(case)["connections"]]
    assert {c["kind"] for c in conns} == {"full", "resumed-id", "resumed-ticket", "resumed-psk", "none"}
    assert {c["ending"] for c in conns} == {"clean", "drop-fin", "drop-rst", "open"}


@pytest.mark.parametrize("case", CASES)
def test_tshark_table_and_independent_reader_agree_with_the_ground_truth(case: str) -> None:
    table, wire, truth = _tables(case)
    conns = truth["connections"]
    assert len(table) == len(wire) == len(conns)  # N connections -> N rows, none merged or lost
    assert list(table["client_port"]) == [c["client_port"] for c in conns]
    assert list(table["handshake"]) == [c["kind"] for c in conns]
    for col in COMPARED:
        assert list(table[col]) == list(wire[col]), col
    assert table["syn_time"].to_numpy() == pytest.approx(wire["syn_time"].to_numpy(), abs=2e-6)
    assert (table["retransmitted_client_to_server"] == 0).all()


@pytest.mark.parametrize("case", CASES)
def test_how_each_connection_ended(case: str) -> None:
    table, wire, truth = _tables(case)
    for row, c in zip(table.to_dict("records"), truth["connections"], strict=True):
        expected = {"clean": ("FIN server", "FIN client"), "drop-fin": ("FIN client",),
                    "drop-rst": ("RST client",), "open": ("capture end",)}[c["ending"]]
        assert row["tcp_end"] in expected, (c, row["tcp_end"])
        assert row["disconnect_seen"] == (c["ending"] == "clean")
        if truth["tls"]:  # decrypted with the key log
            assert row["close_notify_client"] == (c["ending"] == "clean")
            assert row["end_evidence"] == "decrypted"
        assert (row["syn_to_first_publish_ms"] is not None and row["syn_to_first_publish_ms"] > 0) \
            == c["published"]
        assert row["mqtt_connect_ms"] > 0 and row["tcp_connect_ms"] > 0
    if truth["tls"] and truth["connections"][0]["tls_version"] == "TLSv1.2":  # alert records are visible
        assert list(table["alert_records_client"]) == list(wire["alerts_client"])
        assert list(table["alert_records_server"]) == list(wire["alerts_server"])


def test_an_eof_without_close_notify_draws_a_fatal_alert_and_ends_id_resumption() -> None:
    table, _, truth = _tables("t12_session_id")
    dropped = [c["ending"] for c in truth["connections"]].index("drop-fin")
    assert table["alerts_server"].iloc[dropped] == "decode_error"
    assert table["handshake"].iloc[dropped + 1] == "full"  # the session was evicted (measured)


@pytest.mark.parametrize("case", [c for c in CASES if _truth(c)["tls"]])
def test_classification_needs_no_keys(case: str) -> None:
    keyed, _, _ = _tables(case)
    bare, _, _ = _tables(case, keys=False)
    for col in COMPARED:
        assert list(bare[col]) == list(keyed[col]), col
    assert bare["disconnect_seen"].isna().all() and bare["end_evidence"].str.startswith("not decrypted").all()
    if keyed["tls_version"].iloc[0] == "TLS 1.2":  # Finished found after ChangeCipherSpec, same frame
        assert list(bare["tls_handshake_ms"]) == list(keyed["tls_handshake_ms"])


# ---- a synthetic capture with retransmitted segments -------------------------------------------

CLIENT, SERVER, CPORT, SPORT = "10.0.0.2", "10.0.0.1", 40000, 1883
CONNECT = b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04abcd"
CONNACK = b"\x20\x02\x00\x00"
PUBLISH = b"\x30\x0c\x00\x05fix/t" + b"hello"


def _ip_tcp(v6: bool, up: bool, seq: int, ack: int, flags: int, data: bytes) -> bytes:
    sport, dport = (CPORT, SPORT) if up else (SPORT, CPORT)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + data
    if v6:
        src, dst = (b"\xfd" + b"\0" * 14 + b"\x02", b"\xfd" + b"\0" * 14 + b"\x01")
        return struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + (src + dst if up else dst + src) + tcp
    a, b = bytes(map(int, CLIENT.split("."))), bytes(map(int, SERVER.split(".")))
    return struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0) + (a + b if up else b + a) + tcp


def _connection(isn: int) -> list[tuple[bool, int, int, int, bytes]]:
    """(from client, seq, ack, flags, data): CONNECT sent twice, PUBLISH partly sent again."""
    c, s = isn, 5000 + isn
    return [(True, c, 0, 0x02, b""), (False, s, c + 1, 0x12, b""), (True, c + 1, s + 1, 0x10, b""),
            (True, c + 1, s + 1, 0x18, CONNECT), (True, c + 1, s + 1, 0x18, CONNECT),
            (False, s + 1, c + 19, 0x18, CONNACK),
            (True, c + 19, s + 5, 0x18, PUBLISH), (True, c + 24, s + 5, 0x18, PUBLISH[5:]),
            (True, c + 33, s + 5, 0x11, b""), (False, s + 5, c + 34, 0x11, b""), (True, c + 34, s + 6, 0x10, b"")]


def _link(kind: str, v6: bool, ip: bytes) -> bytes:
    etype = 0x86DD if v6 else 0x0800
    if kind == "ethernet":
        return b"\x00\x00\x00\x00\x00\x01" + b"\x00\x00\x00\x00\x00\x02" + struct.pack("!H", etype) + ip
    if kind == "sll":
        return struct.pack("!HHH8sH", 0, 1, 6, b"\0" * 8, etype) + ip
    return struct.pack("=I", 2) + ip  # BSD null loopback, host order, AF_INET


def _write_capture(path: Path, fmt: str, kind: str, v6: bool) -> list[tuple[bool, int]]:
    """Two connections on the same addresses and ports (new ISN); returns (from client, frame length)."""
    frames = [(up, _link(kind, v6, _ip_tcp(v6, up, seq, ack, flags, data)))
              for isn in (1000, 90000) for up, seq, ack, flags, data in _connection(isn)]
    linktype = {"ethernet": 1, "sll": 113, "null": 0}[kind]
    out = bytearray()
    if fmt == "pcap":
        out += struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
        for n, (_, f) in enumerate(frames):
            out += struct.pack("<IIII", 1_700_000_000, n * 1000, len(f), len(f)) + f
    else:
        shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
        out += struct.pack("<II", 0x0A0D0D0A, 12 + len(shb)) + shb + struct.pack("<I", 12 + len(shb))
        idb = struct.pack("<HHI", linktype, 0, 65535)
        out += struct.pack("<II", 1, 12 + len(idb)) + idb + struct.pack("<I", 12 + len(idb))
        for n, (_, f) in enumerate(frames):
            ts = 1_700_000_000_000_000 + n * 1000
            body = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(f), len(f)) + f + b"\0" * (-len(f) % 4)
            out += struct.pack("<II", 6, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))
    path.write_bytes(bytes(out))
    return [(up, len(f)) for up, f in frames]


@pytest.mark.parametrize(("fmt", "kind", "v6"), [("pcap", "sll", False), ("pcapng", "ethernet", True),
                                                  ("pcap", "null", False)])
def test_a_retransmitted_segment_is_counted_once(tmp_path: Path, fmt: str, kind: str, v6: bool) -> None:
    pcap = tmp_path / f"retrans.{fmt}"
    lens = _write_capture(pcap, fmt, kind, v6)
    table = connections_table(pcap, SPORT, False, (), export_chunks)
    wire = pd.DataFrame([vars(r) for r in wire_connections(pcap, SPORT, False)])
    assert len(table) == len(wire) == 2  # the port reused with a new ISN is a new connection
    half = len(lens) // 2
    for n in range(2):
        for parser in (table, wire):
            row = parser.iloc[n]
            assert row["payload_client_to_server"] == len(CONNECT) + len(PUBLISH)
            assert row["retransmitted_client_to_server"] == len(CONNECT) + len(PUBLISH) - 5
            assert row["payload_server_to_client"] == len(CONNACK)
            assert row["retransmitted_server_to_client"] == 0
            assert row["wire_client_to_server"] == sum(n_ for up, n_ in lens[n * half:(n + 1) * half] if up)
            assert row["wire_server_to_client"] == sum(n_ for up, n_ in lens[n * half:(n + 1) * half] if not up)
            assert row["tcp_end"] == "FIN client" and row["handshake"] == "none"
    assert list(table["client_port"]) == [CPORT, CPORT]
    # CONNECT frame 4 -> CONNACK frame 6; epoch seconds as float64 are good to about 0.2 us
    assert table["mqtt_connect_ms"].iloc[0] == pytest.approx(2.0, abs=1e-3)
