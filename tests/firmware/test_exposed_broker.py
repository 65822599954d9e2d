"""The configuration a board's broker gets when it is reachable beyond loopback (issue 22 part 3), on a real
Mosquitto on loopback: an anonymous client is refused, the run's subscriber may read the measured topic but
not write it, and only the run's publisher's messages are delivered (tests/integration/test_board_secrets.py
does the same end to end, from a network namespace against a board's cell)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from fwtest_support import MOSQUITTO, broker_may_read, free_port, mosquitto_running, need_tool

from orchestrator.lab.board_side import with_auth
from orchestrator.lab.brokerconf import CONTAINER_ACL, CONTAINER_PASSWORDS, render_acl, render_mosquitto_conf
from orchestrator.lab.topology import TOPIC
from orchestrator.model.scenario import load_scenario

PASSWORDS = {"publisher": "pub-0123456789abcdef", "subscriber": "sub-0123456789abcdef"}


@pytest.fixture
def exposed_broker() -> Iterator[int]:
    need_tool(MOSQUITTO, "mosquitto")
    passwd = need_tool("mosquitto_passwd", "mosquitto")
    folder = Path(tempfile.mkdtemp(prefix="tb-exposed-"))
    folder.chmod(0o755)  # Mosquitto started as root reads as the mosquitto user
    port = free_port()
    passwords, acl, conf, log = (folder / n for n in ("passwords", "acl", "mosquitto.conf", "mosquitto.log"))
    passwords.write_text("".join(f"{u}:{p}\n" for u, p in PASSWORDS.items()))
    subprocess.run([passwd, "-U", str(passwords)], check=True, capture_output=True)
    passwords.chmod(0o600)
    broker_may_read(passwords)
    acl.write_text(render_acl(TOPIC))
    acl.chmod(0o644)
    text = render_mosquitto_conf(with_auth(load_scenario("plain")), acl=True)
    assert "allow_anonymous false" in text and "listener 1883 0.0.0.0" in text
    conf.write_text(text.replace("listener 1883 0.0.0.0", f"listener {port} 127.0.0.1")
                    .replace(CONTAINER_PASSWORDS, str(passwords)).replace(CONTAINER_ACL, str(acl)))
    conf.chmod(0o644)
    try:
        with mosquitto_running(conf, log, port):
            yield port
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _client(port: int, name: str, user: str | None, received: list[bytes] | None = None) -> tuple[mqtt.Client, str]:
    got: dict[str, str] = {}
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
    if user is not None:
        c.username_pw_set(user, PASSWORDS.get(user, "wrong-password-000"))
    c.on_connect = lambda _c, _u, _f, rc, _p: got.setdefault("rc", str(rc))
    if received is not None:
        c.on_message = lambda _c, _u, m: received.append(m.payload)
    c.connect("127.0.0.1", port, keepalive=10)
    c.loop_start()
    deadline = time.monotonic() + 10
    while "rc" not in got and time.monotonic() < deadline:
        time.sleep(0.02)
    return c, got.get("rc", "no CONNACK")


def test_strangers_are_refused_and_only_the_publisher_writes_the_measured_topic(exposed_broker: int) -> None:
    port = exposed_broker
    for name, user in (("anonymous", None), ("stranger", "stranger")):
        c, rc = _client(port, name, user)
        c.loop_stop()
        assert rc == "Not authorized", (name, rc)
    received: list[bytes] = []
    sub, rc = _client(port, "testbed-subscriber", "subscriber", received)
    assert rc == "Success"
    sub.subscribe(TOPIC, qos=1)
    pub, rc = _client(port, "testbed-publisher", "publisher")
    assert rc == "Success"
    time.sleep(0.3)
    pub.publish(TOPIC, b"from the publisher", qos=1).wait_for_publish(5)
    sub.publish(TOPIC, b"from the subscriber", qos=1).wait_for_publish(5)  # acknowledged, and dropped
    pub.publish(TOPIC, b"from the publisher again", qos=1).wait_for_publish(5)
    deadline = time.monotonic() + 5
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    for c in (sub, pub):
        c.loop_stop()
        c.disconnect()
    assert received == [b"from the publisher", b"from the publisher again"]
