"""Per-message exchange bytes (analysis/exchange.py) on real captures: vdevice against Mosquitto on loopback, plain
and TLS 1.2 ChaCha20-Poly1305, QoS 0/1/2, MQTT 3.1.1 and 5 (with a topic alias), one capture of all twelve runs.

Checked against an independent count from the same capture: tshark's TCP payload lengths (tcp.len) of the
publisher's connection in both directions, from its first PUBLISH to its last acknowledgement, divided by the
messages - no MQTT parsing, no packet-id pairing. A segment TCP sent again (tshark's tcp.analysis.retransmission) is
left out of that count: an exchange's wire bytes are each of its packets once, and what TCP resent is the cell's
tcp_retransmissions (CI rehearsal, stop 46: a 94-B TLS PUBLISH resent once on a loaded loopback made the count one
message too many, 1989 against 1895). And TLS adds 21 B (5 header + 16 tag) to every packet of the
exchange: the TLS run's wire bytes are its MQTT bytes + 21 x its packets, and its MQTT bytes are the plain run's.
The run's one export pass gives the same MQTT packets as an export of the exchange's fields alone. Capturing on lo
needs root (CI runs as root). ``-s`` prints the table.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fwtest_support import Broker, HostBuild, LoCapture, Pki
from test_firmware_tls_acceptance import CHACHA_IANA, CHACHA_OPENSSL, _need_capture

from orchestrator.analysis import exchange
from orchestrator.analysis.fields import parse_fields
from orchestrator.backends.tshark import export_fields
from orchestrator.model.export import ExportRequest

N = 20
CELLS = [(t, q, v) for t in ("plain", "tls") for q in (0, 1, 2) for v in ("3.1.1", "5")]


def _run(build: HostBuild, pki: Pki, broker: Broker, tmp: Path, transport: str, qos: int, mqtt: str) -> None:
    port = broker.tls_port if transport == "tls" else broker.plain_port
    argv = [str(build.vdevice), "--host", "127.0.0.1", "--port", str(port), "--transport", transport,
            "--samples", str(N), "--interval-ms", "5", "--qos", str(qos), "--mqtt", mqtt,
            "--client-id", f"x-{transport}-{qos}-{mqtt}"]
    if mqtt == "5":
        argv += ["--topic-alias", "on"]
    if transport == "tls":
        argv += ["--ca", str(pki.ca), "--server-name", "localhost", "--ciphers", CHACHA_IANA,
                 "--keylog", str(tmp / f"keys-{qos}-{mqtt}.log")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def capture(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path) -> Iterator[tuple[Path, Broker]]:
    _need_capture()
    broker = broker_factory(CHACHA_OPENSSL)
    pcap = tmp_path / "all.pcapng"
    cap = LoCapture(pcap, broker.plain_port, broker.tls_port)
    try:
        for cell in CELLS:
            _run(host_build, pki, broker, tmp_path, *cell)
    finally:
        cap.stop()
    yield pcap, broker


def _tcp_bytes(pcap: Path) -> list[tuple[int, float, int]]:
    """Every TCP segment's payload length, (stream, time, len), but for the segments TCP sent again."""
    out = subprocess.run(["tshark", "-n", "-2", "-r", str(pcap), "-Y", "not tcp.analysis.retransmission", "-T",
                          "fields", "-e", "tcp.stream", "-e", "frame.time_epoch", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True)
    return [(int(s), float(t), int(n)) for s, t, n in (ln.split("\t") for ln in out.stdout.splitlines()) if n]


def test_exchange_bytes_agree_with_the_tcp_count_and_tls_adds_21_per_packet(capture: tuple[Path, Broker],
                                                                             tmp_path: Path) -> None:
    pcap, broker = capture
    tables = {}
    for transport, port in (("plain", broker.plain_port), ("tls", broker.tls_port)):
        keys = tuple(sorted(tmp_path.glob("keys-*.log"))) if transport == "tls" else ()
        text = export_fields(exchange.exchange_request(ExportRequest(pcap, port, transport == "tls", keys)))
        packets = exchange.parse_packets(text, port)
        streams = sorted({p.stream for p in packets if p.up and p.type == exchange.PUBLISH})
        assert len(streams) == 6, f"{transport}: one connection per run"
        for stream, (_, qos, mqtt) in zip(streams, [c for c in CELLS if c[0] == transport], strict=True):
            tables[(transport, qos, mqtt)] = exchange.exchanges([p for p in packets if p.stream == stream]), stream
    tcp = _tcp_bytes(pcap)
    print("\ntransport qos mqtt  mqtt_up mqtt_down mqtt  wire  tcp_count/msg  packets")
    for (transport, qos, mqtt), (table, stream) in tables.items():
        assert len(table) == N and table["complete"].all()
        later = table.iloc[1:]  # the first MQTT 5 PUBLISH carries the topic the others alias
        first, last = table["t_publish"].min(), table["t_done"].max()
        counted = sum(n for s, t, n in tcp if s == stream and first <= t <= last)
        assert counted == table["wire_bytes"].sum(), (transport, qos, mqtt)
        assert later["wire_bytes"].nunique() == 1
        packets = later["packets_up"] + later["packets_down"]
        assert set(packets) == {1 + qos + (qos == 2)}  # PUBLISH, +PUBACK, or +PUBREC +PUBREL +PUBCOMP
        if transport == "tls":
            assert (later["wire_bytes"] - later["mqtt_bytes"] == 21 * packets).all()
            plain = tables[("plain", qos, mqtt)][0].iloc[1:]
            assert list(later["mqtt_bytes"]) == list(plain["mqtt_bytes"])
        row = later.iloc[0]
        print(f"{transport:9} {qos:3} {mqtt:5} {row['mqtt_bytes_up']:8} {row['mqtt_bytes_down']:9} "
              f"{row['mqtt_bytes']:5} {row['wire_bytes']:5} {counted / N:14.2f} {int(packets.iloc[0]):8}")
    _one_pass_agrees(pcap, broker, tmp_path)


def _one_pass_agrees(pcap: Path, broker: Broker, tmp_path: Path) -> None:
    """The exchanges are read from the run's one export pass (analysis/pipeline.py): every MQTT packet of both
    transports, its header flags, length, packet id, wire bytes and the PUBLISH's sequence number, as an export of
    the exchange's own fields gives them."""
    for transport, port in (("plain", broker.plain_port), ("tls", broker.tls_port)):
        keys = tuple(sorted(tmp_path.glob("keys-*.log"))) if transport == "tls" else ()
        request = ExportRequest(pcap, port, transport == "tls", keys)
        alone = exchange.parse_packets(export_fields(exchange.exchange_request(request)), port)
        one_pass = exchange.packets_of_table(parse_fields(export_fields(request)), port)

        def key(p: exchange.MqttPacket) -> tuple[object, ...]:
            return (p.frame, p.time, p.stream, p.up, p.type, p.flags, p.mqtt_len, p.packet_id, p.wire_len,
                    exchange._seq_device(p.payload_hex) if p.payload_hex else (p.seq, p.device))

        assert len(alone) > 12 * N and [key(p) for p in one_pass] == [key(p) for p in alone], transport
        assert sum(p.seq is not None for p in one_pass) >= 6 * N  # the publisher's PUBLISH, by their payloads
