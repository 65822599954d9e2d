"""The virtual ESP32 on mbedTLS 3.6 (Debian 13's libmbedtls-dev, device_stack mbedtls-3.6) against a real Mosquitto.

The core is built on this Debian 12 host against Debian 13's mbedTLS 3.6 package (its static libraries, fetched
and unpacked by firmware/platformio/host/mbedtls3/fetch_debian_mbedtls.py; ~5 s cold, cached in build/mbedtls-3.6).
Ground truth is the wire: tshark reads the ClientHello's and ServerHello's suites and, decrypting with the device's
own key log (TLS 1.3 NSS labels), each PUBLISH's record. TLS 1.3 record overhead = 5 B header + 1 B inner content
type + 16 B tag + the padding mbedTLS adds up to MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY (read from the
package's ssl.h). Capturing on `lo` needs root (CI runs as root)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fwtest_support import (
    HOST_SRC,
    REPO,
    Build36,
    LoCapture,
    Pki,
    broker_may_read,
    configure_argv,
    free_port,
    mosquitto_running,
    need_tool,
    realtime,
)
from test_firmware_tls_acceptance import _mqtt_packet_len, _need_capture, _tshark

BUILD_MBEDTLS = REPO / "firmware" / "platformio" / "host" / "chacha_only" / "build_mbedtls.py"
FW_INCLUDE = REPO / "firmware" / "platformio" / "include"
TLS13_CHACHA = "TLS_CHACHA20_POLY1305_SHA256"
TLS12_CHACHA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"


@pytest.fixture(scope="module")
def build_pad1(tmp_path_factory: pytest.TempPathFactory) -> Build36:
    """vdevice on mbedTLS 3.6 built from Debian 13's source with include/mbedtls3_padding1.h (granularity 1)."""
    need_tool("cmake", "cmake")
    need_tool("cc", "gcc")
    built = subprocess.run([sys.executable, str(BUILD_MBEDTLS), "--line", "3.6-pad1", "-j2"], capture_output=True,
                           text=True, check=False, timeout=1500)
    assert built.returncode == 0, built.stderr
    prefix = Path(built.stdout.strip().splitlines()[-1])
    build = tmp_path_factory.mktemp("fw-host-mbedtls36-pad1")
    # the core is compiled with the library's own user config (its headers must see what the library was built with)
    flags = f'-I{FW_INCLUDE} -DMBEDTLS_USER_CONFIG_FILE=\\"mbedtls3_padding1.h\\"'
    for argv in (configure_argv(HOST_SRC, build, f"-DCMAKE_CXX_FLAGS={flags}",
                                f"-DMBEDTLS_INCLUDE_DIR={prefix / 'include'}",
                                f"-DMBEDTLS_LIB={prefix / 'lib' / 'libmbedtls.a'}",
                                f"-DMBEDX509_LIB={prefix / 'lib' / 'libmbedx509.a'}",
                                f"-DMBEDCRYPTO_LIB={prefix / 'lib' / 'libmbedcrypto.a'}"),
                 ["cmake", "--build", str(build), "-j2", "--target", "vdevice"]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return Build36(build / "vdevice", prefix / "include")


def padding_granularity(include: Path) -> int:
    """The build's TLS 1.3 record padding: the package's mbedtls_config.h if it sets one, else ssl.h's default."""
    for header in ("mbedtls_config.h", "ssl.h"):
        m = re.search(r"^\s*#define\s+MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY\s+(\d+)",
                      (include / "mbedtls" / header).read_text(), flags=re.M)
        if m:
            return int(m.group(1))
    raise AssertionError("MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY not found in the package's headers")


@pytest.fixture
def broker13(pki: Pki, tmp_path: Path) -> Iterator[int]:
    """Mosquitto as the tls13-chacha20 scenario has it: TLS 1.3 only, TLS_CHACHA20_POLY1305_SHA256 only."""
    need_tool("/usr/sbin/mosquitto", "mosquitto")
    port = free_port()
    broker_may_read(pki.server_key)
    conf = tmp_path / "mosquitto13.conf"
    conf.write_text("\n".join(["persistence false", "log_dest stderr", f"listener {port} 127.0.0.1",
                               "allow_anonymous true", f"cafile {pki.ca}", f"certfile {pki.server_cert}",
                               f"keyfile {pki.server_key}", "tls_version tlsv1.3",
                               f"ciphers_tls1.3 {TLS13_CHACHA}", ""]))
    conf.chmod(0o644)
    with mosquitto_running(conf, tmp_path / "mosquitto13.log", port):
        yield port


def vdevice(build: Build36, pki: Pki, port: int, out: Path, payload: int, samples: int,
            ciphers: str, *extra: str, timed: bool = False) -> dict:
    """The 3.6 device's run; ``timed``: under the real-time scheduler (fwtest_support.realtime), for a test that holds
    its clock against the wire's."""
    out.mkdir(parents=True, exist_ok=True)
    wrap = realtime if timed else list
    proc = subprocess.run(
        wrap([str(build.vdevice), "--host", "127.0.0.1", "--port", str(port), "--transport", "tls", "--ca", str(pki.ca),
         "--server-name", "localhost", "--ciphers", ciphers, "--payload", str(payload), "--samples", str(samples),
         "--interval-ms", "10", "--keylog", str(out / "keys.log"), "--summary", str(out / "summary.json"),
         "--connect-timeout-ms", "5000", *extra]),
        capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Mbed TLS 3.6." in proc.stdout  # the device's banner names its stack
    return json.loads((out / "summary.json").read_text())


def publish_overheads(cap: Path, port: int, keylog: Path) -> list[tuple[int, int]]:
    """(MQTT packet bytes, TLS record bytes on the wire - MQTT packet bytes) of each decrypted PUBLISH."""
    rows = _tshark(cap, port, keylog, "mqtt.msgtype == 3", "frame.number", "tls.record.length",
                   "tls.record.content_type", "mqtt.len")
    out: list[tuple[int, int]] = []
    for frame, lens, types, mqtt_lens in rows:
        app = [int(n) for n, t in zip(lens.split("|"), types.split("|"), strict=True) if t == "23"]
        mqtt = [_mqtt_packet_len(int(x)) for x in mqtt_lens.split("|")]
        assert len(app) == len(mqtt), f"frame {frame}: one TLS record per PUBLISH expected"
        out += [(m, 5 + r - m) for r, m in zip(app, mqtt, strict=True)]
    return out


@pytest.mark.slow
def test_tls13_chacha20_from_the_device(build36: Build36, pki: Pki, broker13: int, tmp_path: Path) -> None:
    _need_capture()
    granularity = padding_granularity(build36.include)
    cap = LoCapture(tmp_path / "tls13.pcapng", broker13)
    try:
        summaries = {p: vdevice(build36, pki, broker13, tmp_path / f"p{p}", p, 8, f"{TLS13_CHACHA},{TLS12_CHACHA}")
                     for p in (65, 100)}
    finally:
        cap.stop()
    for s in summaries.values():
        assert (s["tls_version"], s["cipher_suite"], s["messages_sent"]) == ("TLSv1.3", TLS13_CHACHA, 8)
        assert s["tls_library"].startswith("Mbed TLS 3.6.")
        assert s["tls13_padding_granularity"] == granularity  # the device's own word, as its headers say
    keylogs = [tmp_path / f"p{p}" / "keys.log" for p in (65, 100)]
    for keylog in keylogs:
        labels = [line.split(" ")[0] for line in keylog.read_text().splitlines()]
        assert labels == ["CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                          "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"]
    both = tmp_path / "keys-both.log"
    both.write_text("".join(k.read_text() for k in keylogs))

    hellos = _tshark(cap.path, broker13, None, "tls.handshake.type == 1", "tls.handshake.ciphersuite",
                     "tls.handshake.extensions.supported_version")
    assert [h[0] for h in hellos] == ["0x1303|0xcca9|0x00ff"] * 2  # both lists, and nothing else
    assert all(h[1] == "0x0304|0x0303" for h in hellos)
    servers = _tshark(cap.path, broker13, None, "tls.handshake.type == 2", "tls.handshake.ciphersuite",
                      "tls.handshake.extensions.supported_version")
    assert [s[:2] for s in servers] == [["0x1303", "0x0304"]] * 2

    overheads = publish_overheads(cap.path, broker13, both)
    assert len(overheads) == 16
    seen = {}
    for mqtt_len, overhead in overheads:
        padding = -(mqtt_len + 1) % granularity  # inner plaintext = MQTT packet + content type, padded
        assert overhead == 5 + 1 + 16 + padding, (mqtt_len, overhead)
        seen[mqtt_len] = overhead
    print(f"TLS 1.3 on mbedTLS 3.6 (granularity {granularity}): overhead per PUBLISH {seen}")


@pytest.mark.slow
def test_tls12_on_mbedtls36_unchanged_overhead(build36: Build36, pki: Pki, broker_factory, tmp_path: Path) -> None:
    """The `tls` scenario's TLS 1.2 ChaCha20 on 3.6: the 1.2 suite alone keeps the device at TLS 1.2 (21 B)."""
    _need_capture()
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    cap = LoCapture(tmp_path / "tls12.pcapng", broker.tls_port)
    try:
        summary = vdevice(build36, pki, broker.tls_port, tmp_path, 65, 5, TLS12_CHACHA)
    finally:
        cap.stop()
    assert (summary["tls_version"], summary["cipher_suite"]) == ("TLSv1.2", TLS12_CHACHA)
    lines = (tmp_path / "keys.log").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CLIENT_RANDOM ")
    hellos = _tshark(cap.path, broker.tls_port, None, "tls.handshake.type == 1", "tls.handshake.ciphersuite")
    assert [h[0] for h in hellos] == ["0xcca9|0x00ff"]
    assert {o for _, o in publish_overheads(cap.path, broker.tls_port, tmp_path / "keys.log")} == {21}


def test_mbedtls228_names_a_tls13_suite_it_lacks(host_build, pki: Pki, tmp_path: Path) -> None:
    """The 2.28 device refuses a TLS 1.3 suite by name before any connection (no TLS 1.3 in 2.28)."""
    proc = subprocess.run(
        [str(host_build.vdevice), "--host", "127.0.0.1", "--port", str(free_port()), "--transport", "tls",
         "--ca", str(pki.ca), "--ciphers", TLS13_CHACHA, "--samples", "1", "--summary", str(tmp_path / "s.json")],
        capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"vdevice: error CipherNotCompiled: cipher suite {TLS13_CHACHA} is not compiled into this mbedTLS "
        "(mbed TLS 2.28.3)"]
    check = subprocess.run([str(host_build.vdevice), "--check", "--transport", "tls", "--ca", str(pki.ca),
                            "--ciphers", TLS13_CHACHA], capture_output=True, text=True, check=False, timeout=60)
    assert (check.returncode, check.stdout) == (2, "")  # --check refuses it too: the rule device-speaks-tls12's
    assert "CipherNotCompiled" in check.stderr


@pytest.mark.slow
def test_tls13_resume_ticket_resumes_every_reconnection(build36: Build36, pki: Pki, broker13: int,
                                                        tmp_path: Path) -> None:
    """resume-ticket under TLS 1.3: the session is saved when its NewSessionTicket arrives (after the handshake),
    so every connection after the first offers it and resumes - on the wire: pre_shared_key (41) in the ServerHello
    and no Certificate (11) or CertificateVerify (15) after decryption with the device's key log."""
    _need_capture()
    cap = LoCapture(tmp_path / "resume13.pcapng", broker13)
    try:
        summary = vdevice(build36, pki, broker13, tmp_path, 65, 6, f"{TLS13_CHACHA},{TLS12_CHACHA}",
                          "--connection", "resume-ticket", "--per-connection", "2",
                          "--connections-log", str(tmp_path / "connections.csv"))
    finally:
        cap.stop()
    assert (summary["tls_version"], summary["connections"], summary["resumed_connections"]) == ("TLSv1.3", 3, 2)
    claims = [line.split(",")[5] for line in (tmp_path / "connections.csv").read_text().splitlines()[1:]]
    assert claims == ["0", "1", "1"]
    rows = _tshark(cap.path, broker13, tmp_path / "keys.log", "tls.handshake.type", "tcp.stream",
                   "tls.handshake.type", "tls.handshake.extension.type")
    streams: dict[str, list[tuple[set[str], set[str]]]] = {}
    for stream, types, exts in rows:
        streams.setdefault(stream, []).append((set(types.split("|")), set(exts.split("|"))))
    assert len(streams) == 3
    for i, stream in enumerate(sorted(streams, key=int)):
        types = set().union(*(t for t, _ in streams[stream]))
        server_hello_exts = next(e for t, e in streams[stream] if "2" in t)
        resumed = "41" in server_hello_exts
        assert resumed == (i > 0), (stream, server_hello_exts)
        assert ("11" in types) == (i == 0) and ("15" in types) == (i == 0), (stream, types)
        assert "4" in types  # the broker's NewSessionTicket, read and kept by the device


@pytest.mark.slow
def test_granularity_1_build_adds_exactly_22_bytes(build_pad1: Build36, pki: Pki, broker13: int,
                                                  tmp_path: Path) -> None:
    """The variant beside the stock build: TLS 1.3 records unpadded, 5 + 1 + 16 = 22 B per PUBLISH, as OpenSSL."""
    _need_capture()
    cap = LoCapture(tmp_path / "pad1.pcapng", broker13)
    try:
        for p in (65, 100):
            summary = vdevice(build_pad1, pki, broker13, tmp_path / f"p{p}", p, 8, f"{TLS13_CHACHA},{TLS12_CHACHA}")
            assert (summary["tls_version"], summary["cipher_suite"]) == ("TLSv1.3", TLS13_CHACHA)
            assert summary["tls13_padding_granularity"] == 1  # the variant's build says so itself
    finally:
        cap.stop()
    both = tmp_path / "keys-both.log"
    both.write_text("".join((tmp_path / f"p{p}" / "keys.log").read_text() for p in (65, 100)))
    overheads = publish_overheads(cap.path, broker13, both)
    assert len(overheads) == 16 and {o for _, o in overheads} == {22}
    print(f"TLS 1.3 on mbedTLS 3.6, granularity 1: overhead per PUBLISH {dict(overheads)}")


@pytest.mark.parametrize(("mode", "resumed"), [("reconnect", 0), ("resume-id", 2), ("resume-ticket", 2)])
def test_tls12_resumption_on_36_as_on_228(build36: Build36, pki: Pki, broker_factory, tmp_path: Path,
                                          mode: str, resumed: int) -> None:
    """TLS 1.2 on 3.6: the client's claim (the offered master secret kept, read through tls_compat.h) as on 2.28."""
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    summary = vdevice(build36, pki, broker.tls_port, tmp_path, 65, 6, TLS12_CHACHA, "--connection", mode,
                      "--per-connection", "2")
    assert (summary["tls_version"], summary["connections"], summary["resumed_connections"]) == ("TLSv1.2", 3, resumed)
