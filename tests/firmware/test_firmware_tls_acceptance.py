"""Acceptance of the virtual ESP32 against a real Mosquitto on loopback.

Ground truth comes from independent readers: tshark decrypting the capture with vdevice's key log
(ServerHello cipher, PUBLISH packets, TLS record lengths vs RFC 7905's 5 + 16 bytes), and a paho-mqtt
subscriber on the broker's plain listener. Capturing on `lo` needs root (CI runs as root)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from fwtest_support import Broker, HostBuild, LoCapture, Pki, need_tool

CHACHA_OPENSSL = "ECDHE-ECDSA-CHACHA20-POLY1305"
CHACHA_IANA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
TOPIC = "testbed/sensors"
N = 40
PAYLOAD = 65


def _need_capture() -> None:
    need_tool("dumpcap", "tshark")
    need_tool("tshark", "tshark")
    if os.geteuid() != 0:
        pytest.skip("capturing on lo needs root (CI runs as root)")


class Subscriber:
    """paho-mqtt subscriber on the broker's plain listener; an independent receiver."""

    def __init__(self, port: int) -> None:
        self.messages: list[bytes] = []
        self.subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fw-acceptance-sub")
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(TOPIC, qos=0)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.client.on_message = lambda c, u, msg: self.messages.append(bytes(msg.payload))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(10), "subscriber did not get SUBACK"

    def wait_for(self, count: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _vdevice(
    build: HostBuild, pki: Pki, broker: Broker, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    argv = [
        str(build.vdevice),
        "--host",
        "127.0.0.1",
        "--port",
        str(broker.tls_port),
        "--transport",
        "tls",
        "--ca",
        str(pki.ca),
        "--server-name",
        "localhost",
        "--ciphers",
        CHACHA_IANA,
        "--payload",
        str(PAYLOAD),
        "--samples",
        str(N),
        "--interval-ms",
        "20",
        "--seed",
        "7",
        "--keylog",
        str(out / "keys.log"),
        "--send-log",
        str(out / "send.csv"),
        "--summary",
        str(out / "summary.json"),
        "--connect-timeout-ms",
        "5000",
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def _tshark(
    capture: Path, port: int, keylog: Path | None, display_filter: str, *fields: str
) -> list[list[str]]:
    argv = ["tshark", "-n", "-r", str(capture), "-d", f"tls.port=={port},mqtt"]
    if keylog is not None:
        argv += ["-o", f"tls.keylog_file:{keylog}"]
    argv += [
        "-Y",
        display_filter,
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=|",
        "-E",
        "separator=\t",
    ]
    for f in fields:
        argv += ["-e", f]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def _mqtt_packet_len(remaining: int) -> int:
    """Whole MQTT packet: type byte + Remaining Length field (MQTT 3.1.1 2.2.3) + remaining."""
    rl_bytes = 1 if remaining < 128 else 2 if remaining < 16384 else 3 if remaining < 2097152 else 4
    return 1 + rl_bytes + remaining


@pytest.mark.slow
@pytest.mark.timing  # the send schedule: each message within 15 ms of t0 + i x 20 ms
def test_vdevice_tls12_chacha20_against_mosquitto(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    _need_capture()
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    subscriber = Subscriber(broker.plain_port)
    capture = LoCapture(tmp_path / "tls.pcapng", broker.tls_port)
    try:
        proc = _vdevice(host_build, pki, broker, tmp_path)
        subscriber.wait_for(N)
    finally:
        capture.stop()
        subscriber.close()
    assert proc.returncode == 0, proc.stderr + broker.log.read_text(errors="replace")

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is True and summary["errors"] == []
    assert summary["simulated"] is True and summary["device_id"] == "v1"
    assert summary["transport"] == "tls" and summary["tls_version"] == "TLSv1.2"
    assert summary["cipher_suite"] == CHACHA_IANA
    assert summary["messages_sent"] == N
    assert summary["handshake_ms"] > 0 and summary["tcp_connect_ms"] >= 0 and summary["connack_ms"] > 0
    assert {"cpu_user_s", "cpu_sys_s", "max_rss_kb"} <= summary.keys()

    with (tmp_path / "send.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0].keys()) == ["seq", "t_send_us", "bytes"]
    assert [int(r["seq"]) for r in rows] == list(range(N))
    assert all(int(r["bytes"]) == PAYLOAD for r in rows)
    sent_t = {int(r["seq"]): int(r["t_send_us"]) for r in rows}
    # absolute schedule: message i leaves at t0 + i * 20 ms (loopback: within a few ms, no accumulated drift)
    t0 = sent_t[0]
    assert all(abs(sent_t[i] - (t0 + i * 20_000)) < 15_000 for i in range(N)), sent_t

    keylog = tmp_path / "keys.log"
    lines = keylog.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CLIENT_RANDOM ")
    assert [len(part) for part in lines[0].split(" ")[1:]] == [64, 96]

    cap = capture.path
    hello = _tshark(
        cap,
        broker.tls_port,
        keylog,
        "tls.handshake.type == 2",
        "tls.handshake.ciphersuite",
        "tls.handshake.version",
    )
    assert [row[0] for row in hello] == ["0xcca9"]
    assert hello[0][1] == "0x0303"

    publishes = _tshark(
        cap,
        broker.tls_port,
        keylog,
        "mqtt.msgtype == 3",
        "frame.number",
        "tls.record.length",
        "tls.record.content_type",
        "mqtt.len",
        "mqtt.msg",
    )
    seqs: list[int] = []
    for frame, record_lens, content_types, mqtt_lens, msgs in publishes:
        app_records = [
            int(length)
            for length, ctype in zip(record_lens.split("|"), content_types.split("|"), strict=True)
            if ctype == "23"
        ]
        remaining = [int(x) for x in mqtt_lens.split("|")]
        assert len(app_records) == len(remaining), f"frame {frame}: one TLS record per PUBLISH expected"
        for record_len, rem in zip(app_records, remaining, strict=True):
            # RFC 7905 ChaCha20-Poly1305 in TLS 1.2: 5-byte record header + 16-byte tag, no explicit nonce.
            assert record_len + 5 - _mqtt_packet_len(rem) == 21, f"frame {frame}"
        for hex_payload in msgs.split("|"):
            payload = bytes.fromhex(hex_payload.replace(":", ""))
            assert len(payload) == PAYLOAD
            body = json.loads(payload)
            assert set(body) <= {"d", "n", "t", "s", "x"} and {"d", "n", "t", "s"} <= set(body)
            assert body["d"] == "v1"
            assert body["t"] == sent_t[body["n"]]
            assert len(body["s"]) == 4
            seqs.append(body["n"])
    assert seqs == list(range(N))

    # Without the key log nothing inside TLS is readable: the decryption above used vdevice's keys.
    assert _tshark(cap, broker.tls_port, None, "mqtt.msgtype == 3", "frame.number") == []
    # The independent subscriber got every message, byte-identical in size.
    received = sorted(json.loads(m)["n"] for m in subscriber.messages)
    assert received == list(range(N))
    assert {len(m) for m in subscriber.messages} == {PAYLOAD}


def test_vdevice_names_cipher_mismatch_against_aes_only_broker(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    broker: Broker = broker_factory("ECDHE-ECDSA-AES128-GCM-SHA256")
    proc = _vdevice(host_build, pki, broker, tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "TlsNoSharedCipher" in lines[0]
    assert "no shared cipher suite" in lines[0] and f"offered: {CHACHA_IANA}" in lines[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False and summary["messages_sent"] == 0
    assert "no shared cipher suite" in summary["errors"][0]


def test_vdevice_mutual_tls_and_wrong_server_name(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    broker: Broker = broker_factory(CHACHA_OPENSSL, require_certificate=True)
    without_cert = _vdevice(host_build, pki, broker, tmp_path, "--samples", "2")
    assert without_cert.returncode == 1
    assert "Tls" in without_cert.stderr or "PeerClosed" in without_cert.stderr
    with_cert = _vdevice(
        host_build,
        pki,
        broker,
        tmp_path,
        "--samples",
        "2",
        "--cert",
        str(pki.client_cert),
        "--key",
        str(pki.client_key),
    )
    assert with_cert.returncode == 0, with_cert.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["messages_sent"] == 2
    wrong_name = _vdevice(
        host_build,
        pki,
        broker,
        tmp_path,
        "--samples",
        "2",
        "--server-name",
        "broker.example",
        "--cert",
        str(pki.client_cert),
        "--key",
        str(pki.client_key),
    )
    assert wrong_name.returncode == 1
    assert "TlsHostname" in wrong_name.stderr and "broker.example" in wrong_name.stderr


def test_vdevice_plain_qos1_every_message_acknowledged(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    subscriber = Subscriber(broker.plain_port)
    try:
        argv = [
            str(host_build.vdevice),
            "--port",
            str(broker.plain_port),
            "--qos",
            "1",
            "--payload",
            "100",
            "--samples",
            "25",
            "--interval-ms",
            "0",
            "--summary",
            str(tmp_path / "summary.json"),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        subscriber.wait_for(25)
    finally:
        subscriber.close()
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["transport"] == "plain" and summary["tls_version"] is None and summary["handshake_ms"] is None
    )
    assert summary["messages_sent"] == 25 and summary["ok"] is True
    assert sorted(json.loads(m)["n"] for m in subscriber.messages) == list(range(25))
    assert {len(m) for m in subscriber.messages} == {100}


def test_vdevice_sigterm_stops_early_and_still_writes_summary(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    argv = [
        str(host_build.vdevice),
        "--port",
        str(broker.plain_port),
        "--samples",
        "1000",
        "--interval-ms",
        "100",
        "--send-log",
        str(tmp_path / "send.csv"),
        "--summary",
        str(tmp_path / "summary.json"),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while (
        len((tmp_path / "send.csv").read_text().splitlines() if (tmp_path / "send.csv").exists() else []) < 4
    ):
        assert time.monotonic() < deadline, "vdevice sent nothing"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=5)
    assert proc.returncode == 1
    assert err.strip().count("\n") == 0 and "Interrupted: stopped by a signal after" in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = (tmp_path / "send.csv").read_text().splitlines()[1:]
    assert summary["ok"] is False and summary["messages_sent"] == len(rows) >= 3


def test_vdevice_sub_millisecond_interval_keeps_absolute_schedule(
    host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path
) -> None:
    # The orchestrator passes intervals formatted with "{:g}" (e.g. "0.5", "3.6e+06").
    broker: Broker = broker_factory(CHACHA_OPENSSL)
    argv = [
        str(host_build.vdevice),
        "--port",
        str(broker.plain_port),
        "--samples",
        "200",
        "--interval-ms",
        "0.5",
        "--send-log",
        str(tmp_path / "send.csv"),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with (tmp_path / "send.csv").open() as f:
        t = [int(r["t_send_us"]) for r in csv.DictReader(f)]
    assert len(t) == 200
    span = t[-1] - t[0]
    assert 199 * 500 - 2_000 <= span <= 199 * 500 + 20_000, span  # no accumulated drift
