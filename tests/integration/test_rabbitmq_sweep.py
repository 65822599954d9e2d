"""Issue 43 part 3's rabbitmq cell, as the docker-group user: the tls scenario on RabbitMQ 4.0.5's MQTT plugin at
QoS 0 and 1 (one kept-up lab: the second cell starts after the node's in-place restart, whose time cell.json's lab
records). Read from each cell's capture with tshark (decrypted with the clients' key logs): both clients negotiated
TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305 with the broker, and every message the device published reached the
subscriber (the broker's PUBLISHes to it, numbered by the payload's seq). cell.json names the broker build, its VM
flags and the image's versions (rabbitmq-server, Erlang/OTP's erlang-ssl); metrics.json has the broker's CPU (its
whole process tree)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .docker_user import DockerUser

SAMPLES, PAYLOAD, QOS = 10, 100, (0, 1)


@pytest.fixture(scope="module")
def bundle(docker_user: DockerUser) -> Path:
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "rabbitmq")
    proc = docker_user.testbed("sweep", "--payloads", str(PAYLOAD), "--samples", str(SAMPLES), "--interval", "20ms",
                               "--scenarios", "tls", "--baseline", "tls", "--brokers", "rabbitmq",
                               "--qos", ",".join(map(str, QOS)),
                               "--out", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


def _run(bundle: Path, qos: int) -> Path:
    return bundle / "runs" / f"tls-{PAYLOAD}B{'-qos1' if qos else ''}-none-rabbitmq-r1"


def _tshark(run: Path, client: str, display_filter: str, *fields: str) -> list[list[str]]:
    capture = sorted((run / "capture").glob("*.pcap*"))[0]
    argv = ["tshark", "-n", "-r", str(capture), "-d", "tcp.port==8883,tls",
            "-o", f"tls.keylog_file:{run / 'keylogs' / f'{client}.keys'}", "-Y", display_filter,
            "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in fields:
        argv += ["-e", f]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def test_both_cells_ran_on_the_rabbitmq_image(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert set(manifest["cells"]) == {_run(bundle, q).name for q in QOS}
    assert {c["status"] for c in manifest["cells"].values()} == {"ok"}
    for qos in QOS:
        cell = json.loads((_run(bundle, qos) / "cell.json").read_text())
        image = cell["images"]["broker"]
        assert image["image"] == "testbed-broker-rabbitmq:latest", image
        assert image["versions"]["rabbitmq-server"].startswith("4.0.5"), image
        assert "erlang-ssl" in image["versions"], image
        broker = cell["broker"]
        assert (broker["implementation"], broker["version"], broker["tls_library"]) == ("rabbitmq", "4.0.5",
                                                                                        "Erlang/OTP ssl")
        assert broker["erl_args"] == "+sbwt none +sbwtdcpu none +sbwtdio none"
        assert cell["received"] == SAMPLES
    # one kept-up lab: the later cell ran after the node's in-place restart, which the restart command timed
    restarts = [json.loads((_run(bundle, q) / "cell.json").read_text())["lab"].get("broker_restart_s") for q in QOS]
    timed = [r for r in restarts if r is not None]
    print(f"RabbitMQ restart between the cells: {timed} s")
    assert len(timed) == 1 and 0 < timed[0] < 90, restarts


@pytest.mark.parametrize("qos", QOS)
def test_chacha20_on_the_wire_and_every_message_arrived(bundle: Path, qos: int) -> None:
    run = _run(bundle, qos)
    for client, clientid in (("publisher", "testbed-publisher"), ("subscriber", "testbed-subscriber")):
        streams = {r[0] for r in _tshark(run, client, f'mqtt.clientid == "{clientid}"', "tcp.stream")}
        assert len(streams) == 1, (client, streams)
        hello = _tshark(run, client, f"tls.handshake.type == 2 && tcp.stream == {streams.pop()}",
                        "tls.handshake.ciphersuite", "tls.handshake.version")
        assert [(r[0], r[1]) for r in hello] == [("0xcca9", "0x0303")], hello  # TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305
    delivered = _tshark(run, "subscriber", "mqtt.msgtype == 3 && tcp.srcport == 8883", "mqtt.msg", "mqtt.qos")
    seqs, levels = set(), set()
    for msgs, qoss in delivered:
        for hexed, level in zip(msgs.split("|"), qoss.split("|"), strict=True):
            payload = json.loads(bytes.fromhex(hexed.replace(":", "")))
            seqs.add(payload["n"])
            levels.add(int(level))
    assert seqs == set(range(SAMPLES)) and levels == {qos}


@pytest.mark.parametrize("qos", QOS)
def test_the_broker_cpu_is_measured(bundle: Path, qos: int) -> None:
    resources = json.loads((_run(bundle, qos) / "metrics.json").read_text())["resources"]
    cpu = {k: v for k, v in resources.items() if k.startswith("broker_cpu")}
    assert cpu and all(v is not None for v in cpu.values()), resources
