"""The core's ClientTransport (lib/testbed_core/src/client_transport.h), the Transport of the ESP32 env
esp32dev-wificlientsecure over Arduino's WiFiClientSecure, run on the host over the stand-in Client
(host/src/probes/transport_byte_client.h: the core's own mbedTLS TlsTransport, or PlainTcp, behind the
Client interface) by client_transport_probe, against a real Mosquitto on 127.0.0.1.

What the WiFiClientSecure path can measure is what this test reads: no key log, so the capture is NOT
decrypted (no per-message match); the ServerHello's suite, the ClientHello's offer and the TLS record
sizes are read in the clear, and an independent subscriber counts the messages."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fwtest_support import Broker, HostBuild, LoCapture, Pki
from test_firmware_tls_acceptance import (
    CHACHA_IANA,
    CHACHA_OPENSSL,
    PAYLOAD,
    TOPIC,
    Subscriber,
    _mqtt_packet_len,
    _need_capture,
    _tshark,
)

N = 20


def _probe(build: HostBuild, pki: Pki, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(build.build_dir / "client_transport_probe"), "--host", "127.0.0.1", "--port", str(port),
            "--ca", str(pki.ca), "--server-name", "localhost", "--ciphers", CHACHA_IANA, "--samples", str(N),
            "--payload", str(PAYLOAD), "--interval-ms", "20", *extra]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def _done(stdout: str) -> dict[str, str]:
    lines = stdout.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["MSG"] * N + ["DONE"], stdout
    return dict(field.split("=", 1) for field in lines[-1].split(" ")[1:])


def test_client_transport_publishes_over_tls_with_chacha20_on_the_wire(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    _need_capture()
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    subscriber = Subscriber(broker.plain_port)
    capture = LoCapture(tmp_path / "client.pcapng", broker.tls_port)
    try:
        proc = _probe(host_build, pki, broker.tls_port)
        subscriber.wait_for(N)
    finally:
        capture.stop()
        subscriber.close()
    assert proc.returncode == 0, proc.stderr + broker.log.read_text(errors="replace")
    done = _done(proc.stdout)
    assert done["sent"] == str(N) and done["secure"] == "1"
    assert done["tls_version"] == "TLSv1.2" and done["cipher_suite"] == CHACHA_IANA
    # A secure Client connects and handshakes in one call: only the sum is measured.
    assert float(done["handshake_ms"]) > 0 and done["tcp_ms"] == "-"

    cap = capture.path
    offered = _tshark(cap, broker.tls_port, None, "tls.handshake.type == 1", "tls.handshake.ciphersuite")
    assert [row[0] for row in offered] == ["0xcca9|0x00ff"]
    chosen = _tshark(cap, broker.tls_port, None, "tls.handshake.type == 2", "tls.handshake.ciphersuite")
    assert [row[0] for row in chosen] == ["0xcca9"]

    # No key log: nothing inside TLS is readable, only record sizes. Each PUBLISH is one application-data
    # record of MQTT packet + 16-byte Poly1305 tag (RFC 7905: no explicit nonce).
    assert _tshark(cap, broker.tls_port, None, "mqtt.msgtype == 3", "frame.number") == []
    records = _tshark(cap, broker.tls_port, None, f"tcp.dstport == {broker.tls_port} && tls.record.content_type == 23",
                      "tls.record.length", "tls.record.content_type")
    lengths = [int(length) for row in records
               for length, ctype in zip(row[0].split("|"), row[1].split("|"), strict=True) if ctype == "23"]
    publish_record = _mqtt_packet_len(2 + len(TOPIC) + PAYLOAD) + 16
    assert lengths.count(publish_record) == N, lengths

    received = sorted(json.loads(m)["n"] for m in subscriber.messages)
    assert received == list(range(N))
    assert {len(m) for m in subscriber.messages} == {PAYLOAD}


def test_client_transport_publishes_over_plain_tcp(
    host_build: HostBuild, pki: Pki, broker_factory
) -> None:
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    subscriber = Subscriber(broker.plain_port)
    try:
        proc = _probe(host_build, pki, broker.plain_port, "--transport", "plain", "--qos", "1")
        subscriber.wait_for(N)
    finally:
        subscriber.close()
    assert proc.returncode == 0, proc.stderr
    done = _done(proc.stdout)
    assert done["secure"] == "0" and done["cipher_suite"] == "-" and done["handshake_ms"] == "-"
    assert float(done["tcp_ms"]) >= 0
    assert sorted(json.loads(m)["n"] for m in subscriber.messages) == list(range(N))


def test_client_transport_names_the_secure_clients_failure(
    host_build: HostBuild, pki: Pki, broker_factory
) -> None:
    broker: Broker = broker_factory("ECDHE-ECDSA-AES128-GCM-SHA256")
    proc = _probe(host_build, pki, broker.tls_port)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("client_transport_probe: error Connect: connect to 127.0.0.1:")
    assert "no shared cipher suite" in lines[0] and f"offered: {CHACHA_IANA}" in lines[0]
