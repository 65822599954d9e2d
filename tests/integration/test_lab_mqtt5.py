"""A cell across the lab's hosts (tests/integration/labhosts.py) speaks the cell's MQTT on the wire: `testbed run
--inventory ... --qos 1 --mqtt 5 --session persistent` starts the subscriber on the broker host with the cell's
subscription (orchestrator/model/subscription.py), as the single host does. Read from the broker host's capture
with tshark (the subscriber's TLS key log): both clients' CONNECT is MQTT 5 (protocol level 5), the subscriber's
with Clean Start on its first connection and the session's expiry, its SUBSCRIBE asks QoS 1, and the broker
delivers every reading to it at QoS 1, each acknowledged by a PUBACK of the subscriber. Without the subscription
the lab's subscriber spoke 3.1.1 at QoS 0 whatever the cell said.

Needs testbed-labhost:latest (`testbed images build`, which `make test` runs first).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import only_bundle, run_testbed
from .labhosts import Lab, leftovers, open_lab, require_image

SAMPLES = 20
EXPIRY_S = 120


def _mqtt(run: Path, msgtype: int, *fields: str) -> list[list[str]]:
    """One row per MQTT packet of ``msgtype`` in the run's capture (both clients' TLS key logs): its tcp stream and
    ``fields`` (the first occurrence of each)."""
    pcap, keys = run / "capture" / "capture.pcapng", run / "both.keys"
    if not keys.exists():
        keys.write_text("".join(k.read_text() for k in sorted((run / "keylogs").glob("*.keys"))))
    cmd = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keys}", "-Y",
           f"mqtt.msgtype == {msgtype}", "-T", "fields", "-E", "occurrence=f", "-e", "tcp.stream",
           *[a for f in fields for a in ("-e", f)]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    return [line.split("\t") for line in out.splitlines() if line]


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    require_image(request.config)
    with open_lab(tmp_path) as made:
        yield made
    assert leftovers() == []


def test_a_lab_cell_at_qos1_over_mqtt5_subscribes_so_on_the_wire(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_testbed("run", "--inventory", str(lab.inventory), "--scenario", "tls", "--samples", str(SAMPLES),
                       "--interval", "10ms", "--qos", "1", "--mqtt", "5", "--session", "persistent",
                       "--session-expiry-s", str(EXPIRY_S), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = out if (out / "capture").is_dir() else only_bundle(out)
    connects = {row[1]: row for row in _mqtt(run, 1, "mqtt.clientid", "mqtt.ver", "mqtt.conflag.cleansess",
                                             "mqtt.property_id", "mqtt.prop_number")}
    assert set(connects) == {"testbed-subscriber", "testbed-publisher"}, connects
    assert {connects[c][2] for c in connects} == {"5"}, "both clients speak MQTT 5"
    sub_stream, _cid, _ver, clean, prop, expiry = connects["testbed-subscriber"]
    assert clean in ("1", "True"), "a new session on the first connection (Clean Start)"
    assert int(prop, 0) == 0x11 and int(expiry) == EXPIRY_S, "its Session Expiry Interval"
    [subscribe] = _mqtt(run, 8, "mqtt.subscription_options_qos", "mqtt.sub.qos")
    assert subscribe[0] == sub_stream and "1" in subscribe[1:], f"the subscriber asks QoS 1: {subscribe}"
    delivered = [r for r in _mqtt(run, 3, "mqtt.qos", "mqtt.msgid") if r[0] == sub_stream]
    assert len(delivered) == SAMPLES and {r[1] for r in delivered} == {"1"}, delivered
    acked = {r[1] for r in _mqtt(run, 4, "mqtt.msgid") if r[0] == sub_stream}
    assert acked == {r[2] for r in delivered}, "the subscriber acknowledged every delivery"
