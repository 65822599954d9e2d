"""Issue 43's sweep, as the docker-group user: --transports tcp,websocket crossing plain and tls, a payload over
125 B. The websocket cells run on the Mosquitto 2.0.21 image (its `protocol websockets` listener), the tcp cells on
today's broker. Read from each websocket cell's capture with tshark's own websocket fields (decrypted with the
device's key log): exactly one WebSocket frame per MQTT packet, each header as RFC 6455 gives for its length (masked
up: 2 + 4 B, + 2 B over 125 B; unmasked down: 2 B), no extension in the upgrade's answer (no permessage-deflate);
over TLS every record adds 21 B to its frame and the suite is ChaCha20-Poly1305. The analysis says the same
(metrics.json's overhead per_layer: websocket, tls), and the manifest names the 2.0.21 image's mosquitto, OpenSSL
and libwebsockets."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends.tshark import WS_MQTT_LUA

from .docker_user import DockerUser

PAYLOAD, SAMPLES = 200, 10


@pytest.fixture(scope="module")
def bundle(docker_user: DockerUser) -> Path:
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "ws")
    proc = docker_user.testbed("sweep", "--payloads", str(PAYLOAD), "--samples", str(SAMPLES), "--interval", "20ms",
                               "--scenarios", "plain,tls", "--transports", "tcp,websocket", "--out", str(out),
                               timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


def _tshark(run: Path, port: int, tls: bool, display_filter: str, *fields: str) -> list[list[str]]:
    capture = sorted((run / "capture").glob("*.pcap*"))[0]
    decode = ["-d", f"tcp.port=={port},tls", "-d", f"tls.port=={port},http"] if tls else \
        ["-d", f"tcp.port=={port},http"]
    argv = ["tshark", "-n", "-r", str(capture), "-X", f"lua_script:{WS_MQTT_LUA}", *decode,
            "-o", f"tls.keylog_file:{run / 'keylogs' / 'publisher.keys'}", "-Y", display_filter,
            "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in fields:
        argv += ["-e", f]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def _cells(bundle: Path) -> dict[str, dict]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    return manifest["cells"]


def test_every_cell_ran_and_the_ws_cells_on_mosquitto_2021(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    ids = {f"{s}-{PAYLOAD}B-none{t}-r1" for s in ("plain", "tls") for t in ("", "-ws")}
    assert set(manifest["cells"]) == ids and {c["status"] for c in manifest["cells"].values()} == {"ok"}
    def broker(cell_id: str) -> dict:  # what the cell's broker image was and the versions read inside it
        return json.loads((bundle / "runs" / cell_id / "cell.json").read_text())["images"]["broker"]

    for scenario in ("plain", "tls"):
        ws, tcp = broker(f"{scenario}-{PAYLOAD}B-none-ws-r1"), broker(f"{scenario}-{PAYLOAD}B-none-r1")
        assert ws["image"] == "testbed-broker-mosquitto-2.0.21:latest", ws
        assert ws["versions"]["mosquitto"].startswith("2.0.21") and ws["versions"]["libssl3t64"].startswith("3.5.")
        assert any(k.startswith("libwebsockets") for k in ws["versions"]), ws
        assert tcp["image"] == "testbed-broker:latest" and tcp["versions"]["mosquitto"].startswith("2.0.11"), tcp
    for scenario in ("plain", "tls"):
        cell = json.loads((bundle / "runs" / f"{scenario}-{PAYLOAD}B-none-ws-r1" / "cell.json").read_text())
        assert cell["broker"]["listener"] == "websockets" and cell["broker"]["permessage_deflate"] is False


@pytest.mark.parametrize("scenario,port", [("plain", 1883), ("tls", 8883)])
def test_one_frame_per_mqtt_packet_with_rfc6455_headers(bundle: Path, scenario: str, port: int) -> None:
    run = bundle / "runs" / f"{scenario}-{PAYLOAD}B-none-ws-r1"
    tls = scenario == "tls"
    streams = {r[0] for r in _tshark(run, port, tls, 'mqtt.clientid == "testbed-publisher"', "tcp.stream")}
    assert len(streams) == 1
    device = f"tcp.stream == {streams.pop()}"
    answer = _tshark(run, port, tls, f"http.response.code == 101 && {device}", "http.response.line")
    assert answer and "permessage-deflate" not in answer[0][0].lower()
    rows = _tshark(run, port, tls, f"mqtt && {device}", "tcp.dstport", "websocket.payload_length",
                   "websocket.payload_length_ext_16", "websocket.mask", "mqtt.len", "mqtt.msgtype",
                   "tls.record.length", "tls.record.content_type")
    publishes = 0
    for dport, len7s, ext16, masks, rems, types, rec_lens, ctypes in rows:
        len7, mask, rem = len7s.split("|"), masks.split("|"), [int(r) for r in rems.split("|")]
        assert len(len7) == len(rem) == len(mask), "one WebSocket frame per MQTT packet"
        up = int(dport) == port
        packets = [1 + (1 if r < 128 else 2) + r for r in rem]
        extended = iter(int(x) for x in ext16.split("|") if x)
        headers = []
        for n7, m, p in zip(len7, mask, packets, strict=True):
            assert (m in ("1", "True")) == up, "masked up, unmasked down"
            size = p if int(n7) <= 125 else next(extended)
            assert size == p and int(n7) == (p if p <= 125 else 126)
            headers.append(2 + (2 if p > 125 else 0) + (4 if up else 0))
        publishes += types.split("|").count("3") if up else 0
        if tls:
            app = [int(n) for n, t in zip(rec_lens.split("|"), ctypes.split("|"), strict=True) if t == "23"]
            assert [5 + a - p - h for a, p, h in zip(app, packets, headers, strict=True)] == [21] * len(packets)
    assert publishes == SAMPLES
    if tls:
        suites = {r[0] for r in _tshark(run, port, tls, f"tls.handshake.type == 2 && {device}",
                                        "tls.handshake.ciphersuite")}
        assert suites == {"0xcca9"}  # TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256


@pytest.mark.parametrize("scenario", ["plain", "tls"])
def test_the_analysis_gives_websocket_its_own_layer(bundle: Path, scenario: str) -> None:
    run = bundle / "runs" / f"{scenario}-{PAYLOAD}B-none-ws-r1"
    over = json.loads((run / "metrics.json").read_text())["overhead_bytes"]
    assert over["per_layer"]["websocket"] == 2 + 2 + 4 and over["websocket_header_values"] == [8]
    assert over["websocket_unpaired"] == 0
    assert over["per_layer"]["tls"] == (21 if scenario == "tls" else 0)
    tcp = json.loads((bundle / "runs" / f"{scenario}-{PAYLOAD}B-none-r1" / "metrics.json").read_text())
    assert "websocket" not in tcp["overhead_bytes"]["per_layer"]
    assert over["mqtt_len"] == tcp["overhead_bytes"]["mqtt_len"]
