"""analysis/exchange.py: the QoS exchanges of a capture paired by packet id, from tshark's exported fields.

The exported lines are written here as tshark prints them (frame, time, stream, ports, TLS record types and
lengths, MQTT header flags, remaining lengths, packet ids and payloads, '|' between a frame's occurrences).
"""

from __future__ import annotations

import json

from orchestrator.analysis import exchange as ex

BROKER = 1883
DEV, SUB = 50000, 50001


def payload(seq: int) -> str:
    return json.dumps({"d": "v1", "n": seq, "t": 1764470000000000 + seq, "s": [0, 1, 2, 3]},
                      separators=(",", ":")).encode().hex()


def line(frame: int, t: float, stream: int, up: bool, flags: list[int], rems: list[int], ids: list[int],
         msgs: tuple[str, ...] | list[str] = (), tls: list[int] | None = None, port: int = DEV) -> str:
    sport, dport = (port, BROKER) if up else (BROKER, port)
    ctypes = "|".join("23" for _ in tls) if tls else ""
    rlens = "|".join(str(n) for n in tls) if tls else ""
    return "\t".join([str(frame), f"{t:.6f}", str(stream), str(sport), str(dport), ctypes, rlens,
                      "|".join(f"0x{f:02x}" for f in flags), "|".join(str(r) for r in rems),
                      "|".join(str(i) for i in ids), "|".join(msgs)])


def test_qos2_exchange_bytes_both_ways_and_the_subscriber_left_out() -> None:
    text = "\n".join([
        line(1, 1.0, 0, True, [0x10], [23], []),                     # CONNECT: no exchange
        line(2, 1.001, 0, False, [0x20], [2], []),
        line(3, 1.010, 0, True, [0x34], [84], [1], [payload(0)]),    # PUBLISH QoS 2 id 1
        line(4, 1.011, 0, False, [0x50], [2], [1]),                  # PUBREC
        line(5, 1.012, 0, True, [0x62], [2], [1]),                   # PUBREL
        line(6, 1.013, 0, False, [0x70], [2], [1]),                  # PUBCOMP
        line(7, 1.012, 1, False, [0x34], [84], [9], [payload(0)], port=SUB),  # to the subscriber: not ours
        line(8, 1.013, 1, True, [0x50], [2], [9], port=SUB),
    ])
    table = ex.exchanges(ex.parse_packets(text, BROKER))
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["seq"], row["qos"], row["packet_id"], row["complete"]) == (0, 2, 1, True)
    assert (row["mqtt_bytes_up"], row["mqtt_bytes_down"], row["mqtt_bytes"]) == (86 + 4, 4 + 4, 98)
    assert row["wire_bytes"] == 98  # plain TCP: the MQTT packets themselves
    assert round(row["ack_ms_capture"], 3) == 3.0


def test_tls_adds_each_records_header_and_tag() -> None:
    # ChaCha20-Poly1305 at TLS 1.2: record length = MQTT packet + 16; on the wire + 5 of header: 21 B each
    text = "\n".join([
        line(1, 2.0, 0, True, [0x32], [84], [7], [payload(3)], tls=[86 + 16]),
        line(2, 2.001, 0, False, [0x40], [2], [7], tls=[4 + 16]),
    ])
    row = ex.exchanges(ex.parse_packets(text, BROKER)).iloc[0]
    assert row["mqtt_bytes"] == 90
    assert row["wire_bytes"] == 90 + 2 * 21


def test_dup_resend_on_the_next_connection_joins_its_exchange() -> None:
    text = "\n".join([
        line(1, 3.0, 0, True, [0x32], [84], [1], [payload(0)]),
        line(2, 3.001, 0, False, [0x40], [2], [1]),
        line(3, 3.1, 0, True, [0x32], [84], [2], [payload(1)]),       # lost with its connection
        line(4, 8.0, 1, True, [0x3a], [84], [2], [payload(1)]),       # DUP resend on the new one
        line(5, 8.001, 1, False, [0x40], [2], [2]),
        line(6, 8.1, 1, True, [0x30, 0x30], [82, 82], [], [payload(2), payload(3)]),  # two QoS 0 in one frame
    ])
    table = ex.exchanges(ex.parse_packets(text, BROKER))
    assert list(table["seq"]) == [0, 1, 2, 3]
    resent = table.iloc[1]
    assert (resent["publishes"], resent["dup_resends"], resent["streams"], resent["complete"]) == (2, 1, 2, True)
    assert resent["mqtt_bytes_up"] == 2 * 86
    assert list(table["qos"])[2:] == [0, 0] and list(table["mqtt_bytes"])[2:] == [84, 84]
    assert ex.summary(table)["dup_resends"] == 1


def test_an_exchange_without_its_ack_is_incomplete() -> None:
    table = ex.exchanges(ex.parse_packets(line(1, 4.0, 0, True, [0x32], [84], [5], [payload(0)]), BROKER))
    assert not table.iloc[0]["complete"] and ex.summary(table)["complete"] == 0


def test_a_capture_without_publishes_sums_to_nothing() -> None:
    """Every single device's cell is paired now, a failed one's empty capture too: no exchange, no median."""
    block = ex.summary(ex.exchanges([]))
    assert (block["messages"], block["complete"], block["dup_resends"]) == (0, 0, 0)
    assert block["median_wire_bytes"] is None


def fleet_payload(device: str, seq: int) -> str:
    return json.dumps({"d": device, "n": seq, "t": 1764470000000000 + seq, "s": [0, 1, 2, 3]},
                      separators=(",", ":")).encode().hex()


def test_a_fleets_devices_count_their_packet_ids_apart() -> None:
    """Two devices of a fleet use packet id 1 at the same time, each on its own connection: each PUBACK ends its
    own device's exchange (paired by id alone, the second PUBLISH closed the first as never acknowledged and the
    first PUBACK ended the second)."""
    text = "\n".join([
        line(1, 5.000, 0, True, [0x32], [84], [1], [fleet_payload("f0000", 0)]),
        line(2, 5.001, 1, True, [0x32], [84], [1], [fleet_payload("f0001", 0)], port=DEV + 2),
        line(3, 5.004, 0, False, [0x40], [2], [1]),
        line(4, 5.009, 1, False, [0x40], [2], [1], port=DEV + 2),
    ])
    table = ex.exchanges(ex.parse_packets(text, BROKER))
    assert len(table) == 2 and table["complete"].all()
    assert [round(v, 3) for v in table["ack_ms_capture"]] == [4.0, 8.0]
    assert list(table["packets_down"]) == [1, 1]


def test_qos0_rows_and_paired_rows_are_in_publishing_order() -> None:
    """A PUBLISH without packet id is its own exchange, kept apart from the pairing: the table still lists every
    message by its time, whatever kind it is."""
    text = "\n".join([
        line(1, 6.0, 0, True, [0x30], [82], [], [payload(0)], tls=[82 + 16]),
        line(2, 6.1, 0, True, [0x32], [84], [3], [payload(1)], tls=[86 + 16]),
        line(3, 6.2, 0, True, [0x30], [82], [], [payload(2)], tls=[82 + 16]),
        line(4, 6.3, 0, False, [0x40], [2], [3], tls=[4 + 16]),
    ])
    table = ex.exchanges(ex.parse_packets(text, BROKER))
    assert list(table["seq"]) == [0, 1, 2] and list(table["qos"]) == [0, 1, 0]
    assert list(table["wire_bytes"]) == [82 + 21, 86 + 21 + 4 + 21, 82 + 21]
    assert list(table["wire_bytes_down"]) == [0, 25, 0]
