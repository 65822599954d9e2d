"""The testbed's subscriber (orchestrator/clients/subscriber.py) at QoS 2 over MQTT 5 against a real Mosquitto on
loopback, fed by vdevice at QoS 2 with a topic alias: every message logged once, none a duplicate."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from fwtest_support import HostBuild
from test_qos_sessions import broker, run_vdevice  # noqa: F401  (broker: the fixture)

from orchestrator.clients import subscriber


def test_subscriber_at_qos2_mqtt5(host_build: HostBuild, broker: int, tmp_path: Path) -> None:  # noqa: F811
    out, status = tmp_path / "sub.csv", tmp_path / "sub.json"
    proc = subprocess.Popen([sys.executable, subscriber.__file__, "--host", "127.0.0.1", "--port", str(broker),
                             "--qos", "2", "--mqtt", "5", "--out", str(out), "--status", str(status)])
    try:
        end = time.monotonic() + 15
        while time.monotonic() < end and not (status.exists() and json.loads(status.read_text())["subscribed"]):
            time.sleep(0.1)
        run_vdevice(host_build, broker, tmp_path, "--qos", "2", "--mqtt", "5", "--topic-alias", "on",
                    "--samples", "20", "--interval-ms", "5")
        end = time.monotonic() + 15
        while time.monotonic() < end and json.loads(status.read_text())["received"] < 20:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    rows = [r.split(",") for r in out.read_text().splitlines()[1:]]
    assert sorted(int(r[0]) for r in rows) == list(range(20))
    assert all(r[3] == "0" for r in rows), "QoS 2: no duplicate"


class CuttingRelay:
    """TCP relay subscriber -> broker whose ``cut(s)`` closes every open connection and refuses new ones for s
    seconds (the subscriber's own link lost); ``connections`` counts the ones it carried."""

    def __init__(self, broker_port: int) -> None:
        self.broker_port, self.connections, self.refuse_until = broker_port, 0, 0.0
        self.open: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sub, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.refuse_until:
                sub.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.broker_port))
            self.connections += 1
            self.open += [sub, up]
            for a, b in ((sub, up), (up, sub)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def cut(self, seconds: float) -> None:
        self.refuse_until = time.monotonic() + seconds
        for s in self.open:  # FIN both ways (close alone leaves a recv blocked in another thread)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.open = []

    def close(self) -> None:
        self.listener.close()


def test_a_persistent_subscriber_gets_what_arrived_while_its_link_was_down(host_build: HostBuild, broker: int,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    """--session persistent (3.1.1 Clean Session 0): the subscriber's connection is cut for 1.5 s mid-run; paho
    connects again, Mosquitto kept the session and queued the QoS 1 messages meanwhile: every one arrives."""
    relay = CuttingRelay(broker)
    out, status = tmp_path / "sub.csv", tmp_path / "sub.json"
    proc = subprocess.Popen([sys.executable, subscriber.__file__, "--host", "127.0.0.1", "--port", str(relay.port),
                             "--qos", "1", "--session", "persistent", "--out", str(out), "--status", str(status)])
    try:
        end = time.monotonic() + 15
        while time.monotonic() < end and not (status.exists() and json.loads(status.read_text())["subscribed"]):
            time.sleep(0.1)
        threading.Timer(0.8, relay.cut, args=(1.5,)).start()
        run_vdevice(host_build, broker, tmp_path, "--qos", "1", "--samples", "60", "--interval-ms", "50")
        end = time.monotonic() + 20
        while time.monotonic() < end and json.loads(status.read_text())["received"] < 60:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        relay.close()
    assert relay.connections >= 2, "the subscriber connected again after the cut"
    seqs = {int(r.split(",")[0]) for r in out.read_text().splitlines()[1:]}
    assert seqs == set(range(60)), f"missing {sorted(set(range(60)) - seqs)}"
