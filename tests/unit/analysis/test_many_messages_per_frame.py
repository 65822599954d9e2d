"""A frame carrying hundreds of TLS records of MQTT is decoded whole (tshark's layer limit raised).

A broker forwarding ~2,000 PUBLISH/s to one subscriber over loopback writes 64 KiB segments of 600+
TLS records; every record handed to MQTT is one more layer of the frame, and with tshark's default
limit of 500 it stopped there ("Dissector bug ... gui_max_tree_depth") and decoded no MQTT in the rest
of the stream: the fleet bench capture showed 60,719 of 425,000 PUBLISH on the broker->subscriber leg.
The capture here is made up: a TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305 session whose master secret is
in a key log, one segment of 700 encrypted records from the broker.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from orchestrator.analysis.fields import ExportOutcome, ExportRequest, parse_fields
from orchestrator.analysis.messages import PUBLISH, explode_mqtt
from orchestrator.analysis.pipeline import _dissector_bugs
from orchestrator.backends import tshark

BROKER, CLIENT = 8883, 50123
MESSAGES = 700
CLIENT_RANDOM, SERVER_RANDOM, MASTER = bytes(range(32)), bytes(range(32, 64)), bytes(range(100, 148))
SUITE = 0xCCA9


def _prf(secret: bytes, label: bytes, seed: bytes, size: int) -> bytes:
    """TLS 1.2 PRF (P_SHA256)."""
    out, a = b"", label + seed
    while len(out) < size:
        a = hmac.new(secret, a, hashlib.sha256).digest()
        out += hmac.new(secret, a + label + seed, hashlib.sha256).digest()
    return out[:size]


class _Sender:
    """One side's records: in the clear until its ChangeCipherSpec, then ChaCha20-Poly1305 (RFC 7905)."""

    def __init__(self, key: bytes, iv: bytes) -> None:
        self.aead, self.iv, self.seq, self.encrypt = ChaCha20Poly1305(key), iv, 0, False

    def record(self, ctype: int, body: bytes) -> bytes:
        if self.encrypt:
            nonce = bytes(a ^ b for a, b in zip(self.iv, bytes(4) + struct.pack("!Q", self.seq), strict=True))
            body = self.aead.encrypt(nonce, body, struct.pack("!QBHH", self.seq, ctype, 0x0303, len(body)))
            self.seq += 1
        out = struct.pack("!BHH", ctype, 0x0303, len(body)) + body
        if ctype == 20:
            self.encrypt = True
        return out


def _handshake(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "big") + body


def _publish(seq: int) -> bytes:
    topic = b"fleet/all"
    body = b'{"d":"d%d","n":%d,"t":%d,"s":[0,1,2,3]}' % (seq % 7, seq, 1_700_000_000_000_000 + seq)
    variable = struct.pack("!H", len(topic)) + topic + body
    return bytes([0x30, len(variable)]) + variable  # QoS 0, remaining length < 128


def _frame(src: int, dst: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    tcp = struct.pack("!HHIIBBHHH", src, dst, seq, ack, 5 << 4, flags, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 1, 0, 64, 6, 0,
                     bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload


def _capture(folder: Path) -> tuple[Path, Path]:
    block = _prf(MASTER, b"key expansion", SERVER_RANDOM + CLIENT_RANDOM, 88)
    client, server = _Sender(block[:32], block[64:76]), _Sender(block[32:64], block[76:88])
    hello = _handshake(1, struct.pack("!H", 0x0303) + CLIENT_RANDOM + b"\x00" + struct.pack("!HH", 2, SUITE)
                       + b"\x01\x00")
    server_hello = _handshake(2, struct.pack("!H", 0x0303) + SERVER_RANDOM + b"\x00" + struct.pack("!H", SUITE)
                              + b"\x00")
    flights = [(CLIENT, 0x02, b""), (BROKER, 0x12, b""), (CLIENT, 0x10, b""),
               (CLIENT, 0x18, client.record(22, hello)), (BROKER, 0x18, server.record(22, server_hello)),
               (CLIENT, 0x18, client.record(20, b"\x01") + client.record(22, _handshake(20, bytes(12)))),
               (BROKER, 0x18, server.record(20, b"\x01") + server.record(22, _handshake(20, bytes(12)))),
               (BROKER, 0x18, b"".join(server.record(23, _publish(i)) for i in range(MESSAGES)))]
    assert len(flights[-1][2]) < 65000
    out, next_seq = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1), {CLIENT: 0, BROKER: 0}
    for i, (src, flags, payload) in enumerate(flights):
        dst = BROKER if src == CLIENT else CLIENT
        frame = _frame(src, dst, next_seq[src], next_seq[dst], flags, payload)
        next_seq[src] += len(payload) + (1 if flags & 0x02 else 0)
        out += struct.pack("<IIII", 1_700_000_000, i * 1000, len(frame), len(frame)) + frame
    (folder / "many.pcap").write_bytes(out)
    (folder / "keys.log").write_text(f"CLIENT_RANDOM {CLIENT_RANDOM.hex()} {MASTER.hex()}\n")
    return folder / "many.pcap", folder / "keys.log"


def test_a_frame_of_700_tls_records_of_publish_is_decoded_whole(tmp_path: Path) -> None:
    pcap, keys = _capture(tmp_path)
    packets = parse_fields(tshark.export_fields(ExportRequest(pcap, BROKER, True, (keys,))))
    msgs = explode_mqtt(packets)
    pub = msgs[(msgs["mqtt_type"] == PUBLISH).to_numpy()]
    assert pub["seq"].tolist() == list(range(MESSAGES))
    assert (pub["msgs_in_frame"] == MESSAGES).all() and pub["tls_record_len"].notna().all()


def test_a_dissector_error_of_the_exporter_is_a_warning() -> None:
    err = (' ** (tshark:1) 21:42:12.8 [Epan WARNING] -- Dissector bug, protocol MQTT, in packet 18557: '
           './epan/packet.c:2902: failed assertion "saved_layers_len < prefs.gui_max_tree_depth"\n')
    (warning,) = _dissector_bugs(ExportOutcome(["tshark"], 0, "Running as user root\n" + err * 2))
    assert "2 dissector error(s)" in warning and "packet 18557" in warning
    assert _dissector_bugs(ExportOutcome(["tshark"], 0, "Running as user root\n")) == []
