"""The testbed's subscriber (orchestrator/clients/subscriber.py) at QoS 2 over MQTT 5 against a real Mosquitto on
loopback, fed by vdevice at QoS 2 with a topic alias: every message logged once, none a duplicate."""

from __future__ import annotations

import json
import subprocess
import sys
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
