"""Issue 26's sweep, as the docker-group user: plain and tls cells at QoS 1 and 2 over MQTT 3.1.1 and 5. Each cell's
exchanges.csv (analysis/exchange.py via runanalysis/exchanges.py) pairs every message with its acknowledgements, the
subscriber received each message once, and the exchanges' wire bytes agree with an independent count: tshark's
own TCP payload lengths of the device's connection over the exchanges' span. TLS adds 21 B to every packet."""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
from pathlib import Path

import pytest

from .docker_user import DockerUser

SAMPLES = 20
SCENARIOS, QOS, MQTT = ("plain", "tls"), (1, 2), ("3.1.1", "5")
PACKETS = {1: 2, 2: 4}  # PUBLISH + PUBACK; PUBLISH + PUBREC + PUBREL + PUBCOMP


@pytest.fixture(scope="module")
def bundle(docker_user: DockerUser) -> Path:
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "qos")
    proc = docker_user.testbed("sweep", "--payloads", "65", "--samples", str(SAMPLES), "--interval", "20ms",
                               "--scenarios", ",".join(SCENARIOS), "--qos", ",".join(map(str, QOS)), "--mqtt",
                               ",".join(MQTT), "--out", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


def _cells(bundle: Path) -> list[Path]:
    """The run folders with an exchanges.csv: one per cell of the sweep (scenario x QoS x MQTT version), each
    combination once."""
    cells = sorted(p.parent for p in bundle.rglob("exchanges.csv"))
    specs = [json.loads((run / "cell.json").read_text())["spec"] for run in cells]
    ran = sorted((s["scenario"], s["qos"], s["mqtt"]) for s in specs)
    assert ran == sorted(itertools.product(SCENARIOS, QOS, MQTT)), [c.name for c in cells]
    return cells


def _tcp_count(run: Path, first: float, last: float) -> int:
    """TCP payload bytes both ways of the device's connection (CONNECT with client id testbed-publisher)."""
    pcap = sorted((run / "capture").glob("*.pcap*"))[0]
    keys = run / "keylogs" / "publisher.keys"
    common = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keys}"]
    streams = subprocess.run([*common, "-Y", 'mqtt.clientid == "testbed-publisher"', "-T", "fields", "-e",
                              "tcp.stream"], capture_output=True, text=True, check=True).stdout.split()
    assert len(set(streams)) == 1, streams
    rows = subprocess.run([*common, "-Y", f"tcp.stream == {streams[0]}", "-T", "fields", "-e", "frame.time_epoch",
                           "-e", "tcp.len"], capture_output=True, text=True, check=True).stdout.splitlines()
    return sum(int(n) for t, n in (r.split("\t") for r in rows) if first <= float(t) <= last)


def _subscriber_packets(run: Path) -> dict[str, str]:
    """The subscriber's CONNECT protocol level and its SUBSCRIBE's requested QoS, read from the capture."""
    pcap = sorted((run / "capture").glob("*.pcap*"))[0]
    common = ["tshark", "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{run / 'keylogs' / 'subscriber.keys'}",
              "-T", "fields", "-E", "occurrence=f"]
    level = subprocess.run([*common, "-Y", 'mqtt.clientid == "testbed-subscriber"', "-e", "mqtt.ver"],
                           capture_output=True, text=True, check=True).stdout.split()
    qos = subprocess.run([*common, "-Y", "mqtt.msgtype == 8", "-e", "mqtt.sub.qos", "-e",
                          "mqtt.subscription_options_qos"], capture_output=True, text=True, check=True).stdout.split()
    return {"level": ",".join(level), "qos": ",".join(qos)}


def test_the_subscriber_speaks_the_cells_mqtt_at_its_qos(bundle: Path) -> None:
    """The subscriber follows the cell's axes (model/subscription.py): its CONNECT's protocol level is the cell's
    MQTT version (4: 3.1.1, 5) and its SUBSCRIBE asks the cell's QoS, on the wire."""
    for run in _cells(bundle):
        spec = json.loads((run / "cell.json").read_text())["spec"]
        want = {"level": "5" if spec["mqtt"] == "5" else "4", "qos": str(spec["qos"])}
        assert _subscriber_packets(run) == want, run.name


def test_every_exchange_paired_and_counted(bundle: Path) -> None:
    for run in _cells(bundle):
        spec = json.loads((run / "cell.json").read_text())["spec"]
        assert json.loads((run / "cell.json").read_text())["broker"]["persistence"] is False
        rows = list(csv.DictReader((run / "exchanges.csv").open()))
        assert len(rows) == SAMPLES and all(r["complete"] == "True" for r in rows), run.name
        assert {int(r["packets_up"]) + int(r["packets_down"]) for r in rows} == {PACKETS[spec["qos"]]}
        assert all(r["ack_ms_device"] for r in rows), "the device's own time to PUBACK/PUBCOMP"
        first, last = min(float(r["t_publish"]) for r in rows), max(float(r["t_done"]) for r in rows)
        assert sum(int(r["wire_bytes"]) for r in rows) == _tcp_count(run, first, last), run.name
        if spec["scenario"] == "tls":
            assert {int(r["wire_bytes"]) - int(r["mqtt_bytes"]) for r in rows} == {21 * PACKETS[spec["qos"]]}
        received = [r for r in csv.DictReader((run / "per_message.csv").open())]
        assert len(received) == SAMPLES and {r["recv_count"] for r in received} == {"1"}, run.name
