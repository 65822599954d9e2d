"""The device refuses a bad server (issue 22 part 4): vdevice, always given the same CA, server name and
ChaCha20 suite, against a real Mosquitto with a deliberately wrong certificate or TLS configuration.

Each connection fails with a named tb::Err, and a capture of the broker's port shows that no MQTT byte
left the device: every byte the client sent lies in a TLS handshake (22) or alert (21) record and its only
handshake message is the ClientHello, so no key was ever agreed and no application-data record (23),
hence no CONNECT, encrypted or plain, was sent. Capturing on `lo` needs root (CI runs as root)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fwtest_support import Broker, HostBuild, LoCapture, _cert, _write_key, broker_may_read, need_tool
from test_firmware_tls_acceptance import CHACHA_IANA, CHACHA_OPENSSL, _need_capture, _tshark

TLS11_ONLY = (  # Mosquitto's tls_version is a minimum; OpenSSL 3 refuses TLS < 1.2 at SECLEVEL >= 1
    "openssl_conf = openssl_init\n[openssl_init]\nssl_conf = ssl_sect\n[ssl_sect]\n"
    "system_default = system_default_sect\n[system_default_sect]\n"
    "MinProtocol = TLSv1.1\nMaxProtocol = TLSv1.1\nCipherString = DEFAULT@SECLEVEL=0\n"
)
TLS11_SUITE = "ECDHE-ECDSA-AES128-SHA"  # a suite TLS 1.1 can use (the device's all need TLS 1.2)


@pytest.fixture(scope="module")
def bad_pki() -> Iterator[dict[str, Path]]:
    """The CA the device trusts, and broker certificates (all SAN DNS:localhost unless named): from
    another CA, for another name, expired. World-traversable: Mosquitto reads them as its own user."""
    directory = Path(tempfile.mkdtemp(prefix="tb-fw-badpki-"))
    directory.chmod(0o755)
    trusted_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    trusted = _cert("device's CA", trusted_key, None, None, ca=True, sans=[])
    other = _cert("another CA", other_key, None, None, ca=True, sans=[])
    paths = {"ca": directory / "ca.pem"}
    paths["ca"].write_bytes(trusted.public_bytes(serialization.Encoding.PEM))
    for case, issuer, issuer_key, san, expired in [
        ("good", trusted, trusted_key, "localhost", False),
        ("other_ca", other, other_key, "localhost", False),
        ("wrong_name", trusted, trusted_key, "other.example", False),
        ("expired", trusted, trusted_key, "localhost", True),
    ]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(san, key, issuer.subject, issuer_key, ca=False, sans=[x509.DNSName(san)], expired=expired)
        paths[case] = directory / f"{case}.pem"
        paths[case].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, directory / f"{case}.key")
        broker_may_read(directory / f"{case}.key")
    yield paths
    shutil.rmtree(directory, ignore_errors=True)


def _server(bad_pki: dict[str, Path], case: str) -> tuple[Path, Path]:
    return bad_pki[case], bad_pki[case].with_suffix(".key")


def _broker_alerts(capture: Path, port: int) -> list[list[str]]:
    """The broker's alert records: [record version, description]."""
    return _tshark(capture, port, None, f"tcp.srcport == {port} && tls.alert_message", "tls.record.version",
                   "tls.alert_message.desc")


def _client_records(capture: Path, port: int) -> tuple[int, list[str], list[int], list[str], list[str]]:
    """What the client sent to `port`: TCP payload bytes, TLS record content types and lengths,
    handshake message types, alert descriptions (tshark, no key log: there are no keys)."""
    rows = _tshark(capture, port, None, f"tcp.dstport == {port} && tcp.len > 0", "tcp.len",
                   "tls.record.content_type", "tls.record.length", "tls.handshake.type", "tls.alert_message.desc")
    split = [[part for field in col for part in field.split("|") if part] for col in zip(*rows, strict=True)]
    tcp_bytes, types, lengths, handshakes, alerts = split or [[], [], [], [], []]
    return sum(map(int, tcp_bytes)), types, [int(n) for n in lengths], handshakes, alerts


def _device(build: HostBuild, bad_pki: dict[str, Path], broker: Broker, *extra: str) -> subprocess.CompletedProcess:
    """vdevice as in every case here: the trusted CA, server name localhost, ChaCha20 only, 3 messages."""
    argv = [str(build.vdevice), "--host", "127.0.0.1", "--port", str(broker.tls_port), "--transport", "tls",
            "--ca", str(bad_pki["ca"]), "--server-name", "localhost", "--ciphers", CHACHA_IANA, "--samples", "3",
            "--interval-ms", "0", "--connect-timeout-ms", "5000", *extra]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def _refused(host_build: HostBuild, bad_pki: dict[str, Path], broker: Broker, out: Path, name: str) -> str:
    """Runs vdevice under a capture; checks the named error and that no MQTT byte was sent; the
    capture's summary line (shown with pytest -s)."""
    _need_capture()
    capture = LoCapture(out / "refused.pcapng", broker.tls_port)
    try:
        proc = _device(host_build, bad_pki, broker, "--summary", str(out / "summary.json"))
    finally:
        capture.stop()
    assert proc.returncode == 1 and proc.stderr.startswith(f"vdevice: error {name}: "), proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] is False and summary["messages_sent"] == 0 and summary["errors"][0].startswith(name)
    sent, types, lengths, handshakes, alerts = _client_records(capture.path, broker.tls_port)
    assert sent > 0 and sent == sum(n + 5 for n in lengths), "client bytes outside TLS records"
    assert set(types) <= {"21", "22"} and "23" not in types and handshakes == ["1"], (types, handshakes)
    assert _tshark(capture.path, broker.tls_port, None, "mqtt", "frame.number") == []
    assert "New client connected" not in broker.log.read_text(errors="replace")  # Mosquitto saw no CONNECT
    line = f"{name}: client sent {sent} B in {len(types)} records {types}, alerts {alerts}; {proc.stderr.strip()}"
    print(line)
    return line


@pytest.mark.parametrize(
    "case,name,device_alert,text",
    [
        ("other_ca", "TlsCertUntrusted", "48", "does not chain to the CA"),  # alert unknown_ca
        ("wrong_name", "TlsHostname", "42", 'does not match the server name "localhost"'),  # bad_certificate
        ("expired", "TlsCertExpired", "45", "has expired"),  # certificate_expired
    ],
)
def test_device_refuses_bad_certificate(
    host_build: HostBuild, bad_pki: dict[str, Path], broker_factory, tmp_path: Path,
    case: str, name: str, device_alert: str, text: str,
) -> None:
    broker = broker_factory(CHACHA_OPENSSL, server=_server(bad_pki, case))
    line = _refused(host_build, bad_pki, broker, tmp_path, name)
    assert text in line and f"alerts ['{device_alert}']" in line


def test_device_accepts_the_good_certificate_of_the_same_pki(
    host_build: HostBuild, bad_pki: dict[str, Path], broker_factory, tmp_path: Path
) -> None:
    """The control: the same device arguments against the trusted certificate connect and publish."""
    broker = broker_factory(CHACHA_OPENSSL, server=_server(bad_pki, "good"))
    proc = _device(host_build, bad_pki, broker)
    assert proc.returncode == 0, proc.stderr
    assert "New client connected" in broker.log.read_text(errors="replace")  # what a CONNECT leaves in its log


def test_device_refuses_broker_without_its_suite(
    host_build: HostBuild, bad_pki: dict[str, Path], broker_factory, tmp_path: Path
) -> None:
    broker = broker_factory("ECDHE-ECDSA-AES128-GCM-SHA256", server=_server(bad_pki, "good"))
    line = _refused(host_build, bad_pki, broker, tmp_path, "TlsNoSharedCipher")
    assert f"offered: {CHACHA_IANA}" in line and "alerts []" in line
    # the broker's answer to the ClientHello: handshake_failure (40) in a TLS 1.2 record
    assert _broker_alerts(tmp_path / "refused.pcapng", broker.tls_port) == [["0x0303", "40"]]


def test_device_refuses_tls11_only_broker(
    host_build: HostBuild, bad_pki: dict[str, Path], broker_factory, tmp_path: Path
) -> None:
    """The broker runs TLS 1.1 only (it has the device's suite too, usable at 1.2 only): s_client proves
    it negotiates 1.1 and refuses 1.2; the capture shows it answered the device in a TLS 1.1 record."""
    need_tool("openssl", "openssl")
    broker = broker_factory(f"{CHACHA_OPENSSL}:{TLS11_SUITE}", server=_server(bad_pki, "good"),
                            tls_version="tlsv1.1", openssl_conf=TLS11_ONLY)
    for version, works in (("-tls1_1", True), ("-tls1_2", False)):
        probe = subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{broker.tls_port}", version, "-cipher",
             f"{TLS11_SUITE}@SECLEVEL=0", "-CAfile", str(bad_pki["ca"])],
            input="", capture_output=True, text=True, check=False, timeout=30,
        )
        assert (f"Cipher is {TLS11_SUITE}" in probe.stdout) == works, probe.stdout + probe.stderr
    line = _refused(host_build, bad_pki, broker, tmp_path, "TlsVersion")
    assert "in TLS 1.1 (record version 0x0302)" in line and "alerts []" in line
    # handshake_failure (40) in a TLS 1.1 record: the broker chose 1.1, then found no suite usable at 1.1
    assert _broker_alerts(tmp_path / "refused.pcapng", broker.tls_port) == [["0x0302", "40"]]
