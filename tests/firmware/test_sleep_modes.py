"""A board that sleeps, as the virtual ESP32 emulates it (issue 42 part 2): the real vdevice against a real
Mosquitto 2.0 (TLS 1.2, ECDHE-ECDSA-CHACHA20-POLY1305), ``--sleep-mode deep`` between connections.

A deep sleep is emulated as a wake: the connection closed, the TLS client's state forgotten (its contexts, random
generator, CA, saved session: ``TlsTransport::power_off``) but for the session serialized into the bytes an
ESP32 keeps in RTC memory (``KeptSession``), from which the next connection resumes. The wire (tshark on a
loopback capture, as root) shows a resumed handshake after each wake: no Certificate from the broker, the
ticket offered in the ClientHello. What is not emulated is said: the radio's power save and association.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fwtest_support import Broker, HostBuild, Pki
from test_connection_modes import CHACHA_OPENSSL, N, _hellos, _maybe_capture, _resumed, _run, _vdevice


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory(CHACHA_OPENSSL)


@pytest.mark.parametrize("mode", ["resume-ticket", "resume-id"])
def test_deep_sleep_resumes_from_the_rtc_kept_session(host_build: HostBuild, pki: Pki, broker: Broker,
                                                      tmp_path: Path, mode: str) -> None:
    capture = _maybe_capture(broker.tls_port, tmp_path / "tls.pcapng")
    try:
        rows, summary, received = _run(host_build, pki, broker, tmp_path / "run", "--connection", mode,
                                       "--sleep-mode", "deep", "--power-save", "modem-sleep")
    finally:
        if capture is not None:
            capture.stop()
    assert received == list(range(N))
    sleep = summary["sleep"]
    assert isinstance(sleep, dict)
    assert sleep["sleep_mode"] == "deep" and sleep["power_save"] == "modem-sleep"
    assert sleep["power_save_emulated"] is False and "RTC-kept session" in str(sleep["sleep_emulated"])
    assert sleep["sleeps"] == N - 1 and sleep["sessions_kept"] == N - 1  # a wake before every connection but the first
    assert _resumed(rows) == ["0"] + ["1"] * (N - 1), broker.log.read_text(errors="replace")[-3000:]
    if capture is None:
        return
    hellos = _hellos(capture.path, broker.tls_port)
    assert [h["full"] for h in hellos] == [True] + [False] * (N - 1), hellos  # each wake: a resumed handshake
    for h in hellos[1:]:
        assert h["offered"] and h["answered"] == h["offered"]
    assert ["35" in h["ext"] for h in hellos] == [mode == "resume-ticket"] * N


def test_deep_sleep_without_resumption_keeps_nothing(host_build: HostBuild, pki: Pki, broker: Broker,
                                                     tmp_path: Path) -> None:
    rows, summary, _ = _run(host_build, pki, broker, tmp_path / "run", "--connection", "reconnect",
                            "--sleep-mode", "deep")
    sleep = summary["sleep"]
    assert isinstance(sleep, dict) and sleep["sleeps"] == N - 1 and sleep["sessions_kept"] == 0
    assert _resumed(rows) == ["0"] * N


@pytest.mark.parametrize("extra,said", [
    (("--sleep-mode", "light"), "light sleep: NOT emulated"),
    (("--power-save", "modem-sleep"), "power save modem-sleep: NOT emulated"),
    (("--sleep-mode", "deep"), "deep sleep: EMULATED as a wake"),
])
def test_vdevice_says_what_it_emulates(host_build: HostBuild, pki: Pki, broker: Broker, tmp_path: Path,
                                       extra: tuple[str, str], said: str) -> None:
    tmp_path.joinpath("out").mkdir()
    proc = _vdevice(host_build, pki, broker, tmp_path / "out", "--connection", "resume-ticket", *extra)
    assert proc.returncode == 0, proc.stderr
    assert said in proc.stdout, proc.stdout
