"""vdevice over WebSocket (firmware/platformio/lib/testbed_core/src/websocket.h, --mqtt-transport websocket), ws and
wss, without Docker: a WebSocket server written here from RFC 6455 (the upgrade answered with the Sec-WebSocket-Accept
of section 1.3's rule, every frame parsed) relays the MQTT bytes to the host's Mosquitto on loopback, as Mosquitto's
websockets listener would; for wss it terminates TLS 1.2 ChaCha20-Poly1305 itself (the device's TLS under the
WebSocket). Checked on what the device sent: the upgrade's headers, exactly one masked binary frame per MQTT packet
(each frame's payload is one whole packet), each header 2 + 4 B (payload up to 125 B) or 4 + 4 B (126..65535 B), a
the run's messages all sent and its summary's ws_upgrade_ms. And the analysis reads the same from a capture on lo
(root): its export (websocket.h's frames decoded by tshark, orchestrator/backends/ws_mqtt.lua) pairs every MQTT packet
with its frame header, 6 or 8 B up, 2 B down, and over TLS the record adds 21 B (ChaCha20-Poly1305) on top of both.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fwtest_support import Broker, HostBuild, LoCapture, Pki, free_port
from test_firmware_tls_acceptance import CHACHA_IANA, CHACHA_OPENSSL, _need_capture

from orchestrator.analysis.fields import parse_fields
from orchestrator.analysis.messages import explode_mqtt
from orchestrator.backends.tshark import export_fields
from orchestrator.model.export import ExportRequest

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
N, PAYLOAD = 12, 200  # a PUBLISH over 125 B: the 16-bit length


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def mqtt_packet_len(data: bytes) -> int:
    """The whole MQTT packet's length from its fixed header (type byte + variable-length remaining length)."""
    mult, value, i = 1, 0, 1
    while True:
        b = data[i]
        value += (b & 0x7F) * mult
        i += 1
        if not b & 0x80:
            return i + value
        mult *= 128


@dataclass
class Seen:
    request: str = ""
    frames: list[tuple[int, int, int, bool]] = field(default_factory=list)  # opcode, header bytes, payload, masked
    packets_whole: list[bool] = field(default_factory=list)
    error: str = ""


def serve(listener: socket.socket, broker_port: int, seen: Seen, tls: ssl.SSLContext | None) -> None:
    conn, _ = listener.accept()
    if tls is not None:
        conn = tls.wrap_socket(conn, server_side=True)
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(1)
        seen.request = head.decode()
        key = next(line.split(":", 1)[1].strip() for line in seen.request.split("\r\n")
                   if line.lower().startswith("sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        conn.sendall(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n".encode())
        upstream = socket.create_connection(("127.0.0.1", broker_port))
        threading.Thread(target=down, args=(upstream, conn), daemon=True).start()
        up(conn, upstream, seen)
    except Exception as exc:  # noqa: BLE001 - the test reads it
        seen.error = repr(exc)
    finally:
        conn.close()


def up(conn: socket.socket, upstream: socket.socket, seen: Seen) -> None:
    """Device -> broker: every frame parsed, unmasked, its payload relayed."""
    while True:
        try:
            b0, b1 = recv_exact(conn, 2)
        except (EOFError, OSError):  # the broker closed after the DISCONNECT (down below closed the device's side)
            return
        length, header = b1 & 0x7F, 2
        if length == 126:
            length, header = int.from_bytes(recv_exact(conn, 2), "big"), 4
        elif length == 127:
            length, header = int.from_bytes(recv_exact(conn, 8), "big"), 10
        masked = bool(b1 & 0x80)
        mask = recv_exact(conn, 4) if masked else b"\0\0\0\0"
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(recv_exact(conn, length)))
        seen.frames.append((b0, header + (4 if masked else 0), length, masked))
        if b0 & 0x0F == 0x8:  # close
            upstream.close()
            return
        seen.packets_whole.append(mqtt_packet_len(payload) == len(payload))
        upstream.sendall(payload)


def down(upstream: socket.socket, conn: socket.socket) -> None:
    """Broker -> device: what Mosquitto sent, as unmasked binary frames."""
    try:
        while data := upstream.recv(4096):
            head = bytes([0x82, len(data)]) if len(data) <= 125 else bytes([0x82, 126]) + len(data).to_bytes(2, "big")
            conn.sendall(head + data)
        conn.shutdown(socket.SHUT_RDWR)  # as Mosquitto's listener: the broker's close ends the device's connection
    except OSError:
        pass


@pytest.mark.parametrize("transport", ["plain", "tls"])
def test_vdevice_speaks_mqtt_over_websocket(transport: str, host_build: HostBuild, pki: Pki, broker_factory,
                                            tmp_path: Path) -> None:
    _need_capture()
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    tls = None
    if transport == "tls":
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.maximum_version = ssl.TLSVersion.TLSv1_2
        tls.set_ciphers(CHACHA_OPENSSL)
        tls.load_cert_chain(pki.server_cert, pki.server_key)
    listener = socket.create_server(("127.0.0.1", port := free_port()))
    seen = Seen()
    server = threading.Thread(target=serve, args=(listener, broker.plain_port, seen, tls), daemon=True)
    server.start()
    summary = tmp_path / "summary.json"
    argv = [str(host_build.vdevice), "--host", "127.0.0.1", "--port", str(port), "--transport", transport,
            "--mqtt-transport", "websocket", "--samples", str(N), "--interval-ms", "5", "--qos", "1",
            "--payload", str(PAYLOAD), "--summary", str(summary)]
    keys = tmp_path / "keys.log"
    if transport == "tls":
        argv += ["--ca", str(pki.ca), "--server-name", "localhost", "--ciphers", CHACHA_IANA, "--keylog", str(keys)]
    cap = LoCapture(pcap := tmp_path / "ws.pcapng", port)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        server.join(timeout=10)
    finally:
        cap.stop()
        listener.close()
    assert proc.returncode == 0, proc.stderr + seen.error
    assert seen.error == ""
    request = seen.request.split("\r\n")
    assert request[0] == "GET /mqtt HTTP/1.1"
    for line in ("Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Protocol: mqtt",
                 "Sec-WebSocket-Version: 13"):
        assert line in request
    assert not any(h.lower().startswith("sec-websocket-extensions") for h in request)  # no permessage-deflate
    data = seen.frames
    assert all(f[0] == 0x82 and f[3] for f in data)  # FIN + binary, masked
    # the device's packets at QoS 1: CONNECT, N PUBLISH, DISCONNECT; one frame each, each frame one whole packet
    assert len(data) == 1 + N + 1 and all(seen.packets_whole)
    assert [h for _, h, n, _ in data] == [2 + 4 if n <= 125 else 4 + 4 for _, _, n, _ in data]
    assert sum(n > 125 for _, _, n, _ in data) == N  # the PUBLISHes took the 16-bit length
    s = json.loads(summary.read_text())
    assert s["messages_sent"] == N and s["mqtt_transport"] == "websocket" and s["ws_upgrade_ms"] > 0
    request = ExportRequest(pcap, port, transport == "tls", (keys,) if transport == "tls" else (), websocket=True)
    msgs = explode_mqtt(parse_fields(export_fields(request)))
    up_ = msgs[msgs["dst_port"] == port]
    down_ = msgs[msgs["src_port"] == port]
    assert len(up_) == len(data) and len(down_) == 1 + N  # CONNACK and N PUBACK
    assert up_["ws_header_len"].tolist() == [h for _, h, _, _ in data]
    assert set(down_["ws_header_len"]) == {2}
    if transport == "tls":  # each frame its own record: 5 B of header and ChaCha20-Poly1305's 16-B tag
        over = msgs["tls_record_len"] + 5 - msgs["mqtt_len"] - msgs["ws_header_len"]
        assert set(over) == {21}
