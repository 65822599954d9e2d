"""QoS 2, MQTT 5 and persistent sessions of the device core (publisher_session.cpp) against a real Mosquitto
on loopback, with an independent subscriber (paho) and, for the link drop, a TCP relay that parses what
crosses it into MQTT packets (the wire's own count, not the device's).

- QoS 2: every PUBLISH gets PUBREC, PUBREL, PUBCOMP; the subscriber receives each message exactly once.
- MQTT 5 topic alias: Mosquitto accepts the PUBLISHes with an empty topic and alias 1; the subscriber gets
  them on the real topic; the wire shows one PUBLISH carrying the topic and the rest 15 B shorter.
- A persistent session whose link is dead for 3 s: the device's PUBACK wait times out, it opens the session
  again, Mosquitto says session present, the unacknowledged PUBLISHes go again with DUP (counted on the
  wire), and the subscriber has every message, some late.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from fwtest_support import MOSQUITTO, HostBuild, free_port, mosquitto_running, need_tool

from orchestrator.clients.payload import parse_message

TOPIC = "testbed/sensors"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    need_tool(MOSQUITTO, "mosquitto")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_topic_alias 10\n")
    with mosquitto_running(conf, tmp_path / "mosquitto.log", port):
        yield port


class Subscriber:
    """paho at QoS 2 on the topic: (seq, arrival time, dup) of every message."""

    def __init__(self, port: int, protocol: mqtt.MQTTProtocolVersion) -> None:
        self.got: list[tuple[int, float, bool, str]] = []
        self.ready = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fw-test-sub", protocol=protocol)
        self.client.on_connect = lambda c, *_: c.subscribe(TOPIC, qos=2)
        self.client.on_subscribe = lambda *_: self.ready.set()
        self.client.on_message = self._message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.ready.wait(10), "the subscriber did not subscribe"

    def _message(self, _c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        parsed = parse_message(bytes(msg.payload))
        assert parsed is not None
        self.got.append((parsed[1], time.time(), bool(msg.dup), msg.topic))

    def wait_for(self, n: int, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while len({s for s, *_ in self.got}) < n and time.monotonic() < end:
            time.sleep(0.05)

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def run_vdevice(build: HostBuild, port: int, tmp: Path, *args: str, timeout: float = 60) -> dict:
    summary, send_log = tmp / "summary.json", tmp / "send.csv"
    proc = subprocess.run([str(build.vdevice), "--port", str(port), "--send-log", str(send_log),
                           "--summary", str(summary), *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(summary.read_text())
    out["send_log"] = send_log.read_text().splitlines()
    return out


@dataclass
class Relay:
    """TCP relay device -> broker that reads the device's bytes as MQTT packets. ``down()`` kills the link:
    the open connections carry nothing more (their bytes are thrown away, as a dead link loses them) and
    new ones are refused until ``up()``."""

    broker_port: int
    port: int = field(default_factory=free_port)
    packets: list[tuple[int, int]] = field(default_factory=list)  # (first byte, whole length), device -> broker
    dead: bool = False
    epoch: int = 0

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        self.dead, self.epoch = True, self.epoch + 1

    def up(self) -> None:
        self.dead = False

    def _accept(self) -> None:
        while True:
            try:
                dev, _ = self.listener.accept()
            except OSError:
                return
            if self.dead:
                dev.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.broker_port))
            epoch = self.epoch
            threading.Thread(target=self._pipe, args=(dev, up, epoch, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, dev, epoch, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, epoch: int, parse: bool) -> None:
        buf = b""
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:  # closed: the end goes on (the other direction keeps its own)
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            if self.epoch != epoch:  # the link under this connection died: its bytes are lost
                continue
            if parse:
                buf = self._packets(buf + data)
            dst.sendall(data)

    def _packets(self, buf: bytes) -> bytes:
        while len(buf) >= 2:
            length, mult, i = 0, 1, 1
            while i < len(buf) and buf[i] & 0x80:
                length += (buf[i] & 0x7F) * mult
                mult, i = mult * 128, i + 1
            if i >= len(buf):
                return buf
            length += (buf[i] & 0x7F) * mult
            end = i + 1 + length
            if end > len(buf):
                return buf
            self.packets.append((buf[0], end))
            buf = buf[end:]
        return buf

    def close(self) -> None:
        self.listener.close()


def test_qos2_exchange_completes_exactly_once(host_build: HostBuild, broker: int, tmp_path: Path) -> None:
    sub = Subscriber(broker, mqtt.MQTTv311)
    try:
        out = run_vdevice(host_build, broker, tmp_path, "--qos", "2", "--samples", "30", "--interval-ms", "5",
                          "--inflight", "4")
        sub.wait_for(30)
    finally:
        sub.stop()
    assert out["ok"] and out["messages_sent"] == 30
    seqs = sorted(s for s, *_ in sub.got)
    assert seqs == list(range(30)), "QoS 2: each message exactly once"
    rows = [r.split(",") for r in out["send_log"][1:]]
    assert out["send_log"][0] == "seq,t_send_us,bytes,ack_us,mqtt_bytes"
    assert sorted(int(r[0]) for r in rows) == list(range(30))
    assert all(int(r[3]) > 0 for r in rows), "every message has its time to PUBCOMP"


def test_mqtt5_topic_alias_accepted_by_mosquitto(host_build: HostBuild, broker: int, tmp_path: Path) -> None:
    relay = Relay(broker)
    sub = Subscriber(broker, mqtt.MQTTv5)
    try:
        out = run_vdevice(host_build, relay.port, tmp_path, "--mqtt", "5", "--topic-alias", "on", "--qos", "1",
                          "--samples", "10", "--interval-ms", "5")
        sub.wait_for(10)
    finally:
        sub.stop()
        relay.close()
    assert out["ok"], out["errors"]
    assert sorted(s for s, *_ in sub.got) == list(range(10))
    assert {t for *_, t in sub.got} == {TOPIC}, "the broker resolved the alias to the topic"
    publishes = [n for first, n in relay.packets if first >> 4 == 3]
    assert len(publishes) == 10
    # the first carries the 15-byte topic; the others an empty one (the alias property is in all of them)
    assert publishes[0] - publishes[1] == len(TOPIC)
    assert len(set(publishes[1:])) == 1


def test_persistent_session_resends_with_dup_after_link_drop(host_build: HostBuild, broker: int,
                                                             tmp_path: Path) -> None:
    relay = Relay(broker)
    sub = Subscriber(broker, mqtt.MQTTv311)
    samples, interval_s, drop_s = 40, 0.1, 3.0
    try:
        def drop() -> None:
            time.sleep(1.0)
            relay.down()
            time.sleep(drop_s)
            relay.up()

        threading.Thread(target=drop, daemon=True).start()
        out = run_vdevice(host_build, relay.port, tmp_path, "--qos", "1", "--session", "persistent",
                          "--client-id", "fw-test-persistent", "--samples", str(samples), "--interval-ms",
                          str(interval_s * 1000), "--inflight", "8", "--ack-timeout-ms", "1000")
        sub.wait_for(samples)
    finally:
        sub.stop()
        relay.close()
    assert out["ok"], out["errors"]
    assert out["reconnects"] >= 1 and out["resent"] >= 1
    assert sorted({s for s, *_ in sub.got}) == list(range(samples)), "every message delivered"
    dup_on_wire = sum(1 for first, _ in relay.packets if first >> 4 == 3 and first & 0x08)
    assert dup_on_wire == out["resent"], "the DUP PUBLISHes the relay saw are the device's resends"
    rows = {int(r.split(",")[0]): r.split(",") for r in out["send_log"][1:]}
    late = [s for s, r in rows.items() if r[3] and int(r[3]) > drop_s * 1e6 / 2]
    assert late, "some messages were acknowledged late (after the link came back)"
