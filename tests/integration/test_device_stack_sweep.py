"""Issue 25's sweep, as the docker-group user: the virtual device on mbedTLS 3.6 (--device-stacks mbedtls-3.6) runs
plain, tls (TLS 1.2) and tls13-chacha20 (TLS 1.3) cells; the same sweep's tls cells on 2.28 give the same TLS 1.2
figures. Every figure is read from the cell's capture with tshark, decrypted with the device's own key log. (The
2.28 sweep runs no plain cell: nothing here reads one, and every other sweep of the suite runs plain on 2.28, the
default.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import owned
from .docker_user import DockerUser

PAYLOADS = (65, 100)
SAMPLES = 20
# mbedTLS 3.6's TLS 1.3 record padding in Debian 13's build: MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY's default
# (ssl.h), read from the very package by tests/firmware/test_mbedtls36_device.py
GRANULARITY = 16


def _sweep(user: DockerUser, name: str, *args: str) -> Path:
    out = user.mkdir(user.work / name)
    proc = user.testbed("sweep", "--payloads", ",".join(map(str, PAYLOADS)), "--samples", str(SAMPLES),
                        "--interval", "20ms", "--out", str(out), *args, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def bundles(docker_user: DockerUser) -> dict[str, Path]:
    docker_user.testbed("down")
    return {"3.6": _sweep(docker_user, "stack36", "--scenarios", "plain,tls,tls13-chacha20",
                          "--device-stacks", "mbedtls-3.6"),
            "2.28": _sweep(docker_user, "stack228", "--scenarios", "tls", "--baseline", "tls")}


def _tshark(run: Path, display_filter: str, *fields: str) -> list[list[str]]:
    captures = sorted((run / "capture").glob("*.pcap*"))
    assert captures, f"no capture in {run}"
    argv = ["tshark", "-n", "-r", str(captures[0]), "-o", f"tls.keylog_file:{run / 'keylogs' / 'publisher.keys'}",
            "-Y", display_filter, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in fields:
        argv += ["-e", f]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines() if line.strip()]


def _device(run: Path) -> str:
    """A display filter for the device's own TCP connection (its CONNECT names client id testbed-publisher): the
    capture also holds the subscriber's TLS connection, an OpenSSL client with OpenSSL's suites."""
    streams = {row[0] for row in _tshark(run, 'mqtt.clientid == "testbed-publisher"', "tcp.stream")}
    assert len(streams) == 1, streams
    return f"tcp.stream == {streams.pop()}"


def _record_overheads(run: Path) -> set[tuple[int, int]]:
    """TLS record bytes on the wire (header included) minus the MQTT PUBLISH they carry, per PUBLISH; every one
    of the cell's PUBLISH decrypted."""
    out: list[tuple[int, int]] = []
    for lens, types, mqtt_lens in _tshark(run, f"mqtt.msgtype == 3 && {_device(run)}", "tls.record.length",
                                          "tls.record.content_type", "mqtt.len"):
        app = [int(n) for n, t in zip(lens.split("|"), types.split("|"), strict=True) if t == "23"]
        rems = [int(x) for x in mqtt_lens.split("|")]
        assert len(app) == len(rems), "one TLS record per PUBLISH"
        packets = [1 + (1 if m < 128 else 2) + m for m in rems]  # fixed header + Remaining Length + remaining
        out += [(p, 5 + r - p) for r, p in zip(app, packets, strict=True)]
    assert len(out) == SAMPLES
    return set(out)


def test_tls13_cells_from_the_36_device(bundles: dict[str, Path]) -> None:
    bundle = bundles["3.6"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    ids = {f"{s}-{p}B-none-mbedtls36-r1" for s in ("plain", "tls", "tls13-chacha20") for p in PAYLOADS}
    assert set(manifest["cells"]) == ids and {c["status"] for c in manifest["cells"].values()} == {"ok"}
    for payload in PAYLOADS:
        cell_id = f"tls13-chacha20-{payload}B-none-mbedtls36-r1"
        run = bundle / "runs" / cell_id
        cell = json.loads((run / "cell.json").read_text())
        assert cell["spec"]["device_stack"] == "mbedtls-3.6"
        assert cell["device"]["tls_library"].startswith("Mbed TLS 3.6.")  # the device's own banner
        assert manifest["cells"][cell_id]["device"] == cell["device"]
        device = _device(run)
        assert [h[0] for h in _tshark(run, f"tls.handshake.type == 1 && {device}", "tls.handshake.ciphersuite")] == [
            "0x1303|0xcca9|0x00ff"]
        assert [h[:2] for h in _tshark(run, f"tls.handshake.type == 2 && {device}", "tls.handshake.ciphersuite",
                                       "tls.handshake.extensions.supported_version")] == [["0x1303", "0x0304"]]
        ((mqtt_len, overhead),) = _record_overheads(run)  # one PUBLISH size, one overhead
        padding = -(mqtt_len + 1) % GRANULARITY  # inner plaintext: the PUBLISH + its content type byte
        print(f"TLS 1.3 on mbedTLS 3.6, {payload} B payload, {mqtt_len} B PUBLISH: {overhead} B per record "
              f"(22 + {padding} padding)")
        assert overhead == 22 + padding
        metrics = json.loads((run / "metrics.json").read_text())  # the analysis reads the same from the wire
        assert metrics["overhead_bytes"]["tls_overhead_values"] == [overhead]
        split = metrics["overhead_bytes"]["tls13_record"]  # header, inner type, tag, padding; the device's granularity
        assert (split["records"], split["header"], split["inner_content_type"], split["tag"]) == (SAMPLES, 5, 1, 16)
        assert split["padding_values"] == [padding] and split["padding_granularity"] == GRANULARITY
        assert split["padding_granularity_source"] == "the device's summary" and split["padding_as_granularity_implies"]
        assert cell["device"]["tls13_padding_granularity"] == GRANULARITY
        print(f"  handshake bytes client->server {metrics['handshake']['bytes_client_to_server']}, "
              f"server->client {metrics['handshake']['bytes_server_to_client']}")
    report = (bundle / "report.md").read_text()  # the stack section: TLS 1.2 and 1.3 on 3.6 (no 2.28 cell here)
    section = report.split("## The device's TLS stack", 1)[1].split("\n## ", 1)[0]
    assert "### 65 B payload" in section and "### 100 B payload" in section
    assert "| TLS 1.3 record: padding | n/a | n/a | 11.0 |" in section and "| cells | no cell |" in section


def test_tls12_is_the_same_on_both_stacks(bundles: dict[str, Path]) -> None:
    for payload in PAYLOADS:
        runs = {stack: bundles[stack] / "runs" / f"tls-{payload}B-none{suffix}-r1"
                for stack, suffix in (("3.6", "-mbedtls36"), ("2.28", ""))}
        hello = {s: _tshark(r, f"tls.handshake.type == 1 && {_device(r)}", "tls.handshake.ciphersuite")
                 for s, r in runs.items()}
        assert hello["3.6"] == hello["2.28"] == [["0xcca9|0x00ff"]]
        server = {s: _tshark(r, f"tls.handshake.type == 2 && {_device(r)}", "tls.handshake.ciphersuite")
                  for s, r in runs.items()}
        assert server["3.6"] == server["2.28"] == [["0xcca9"]]
        ((_, overhead),) = _record_overheads(runs["3.6"])
        assert _record_overheads(runs["3.6"]) == _record_overheads(runs["2.28"]) and overhead == 21
        metrics = {s: json.loads((r / "metrics.json").read_text()) for s, r in runs.items()}
        keys = ("n_publish", "mqtt_len", "tls_record_len", "tls_overhead", "frame_len", "tls_overhead_values")
        assert ({k: metrics["3.6"]["overhead_bytes"][k] for k in keys}
                == {k: metrics["2.28"]["overhead_bytes"][k] for k in keys})  # per-message bytes: the same
        print(f"TLS 1.2, {payload} B: handshake bytes client->server "
              f"{ {s: m['handshake']['bytes_client_to_server'] for s, m in metrics.items()} }, server->client "
              f"{ {s: m['handshake']['bytes_server_to_client'] for s, m in metrics.items()} }")
        cells = {s: json.loads((r / "cell.json").read_text()) for s, r in runs.items()}
        # as each names itself: "mbed TLS 2.28.3" (2.x's spelling), "Mbed TLS 3.6.6"
        assert cells["2.28"]["device"]["tls_library"].lower().startswith("mbed tls 2.28.")
        assert cells["3.6"]["device"]["tls_library"].lower().startswith("mbed tls 3.6.")
        assert cells["2.28"]["device"]["tls13_padding_granularity"] is None  # 2.28 has no TLS 1.3
        assert all("tls13_record" not in m["overhead_bytes"] for m in metrics.values())  # TLS 1.2: not split
    assert owned("container") == [] and owned("network") == []
