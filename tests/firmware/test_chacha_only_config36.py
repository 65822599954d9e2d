"""The ChaCha-only build for mbedTLS 3.6 (PlatformIO env esp32dev-idf5-tls13) proven on this computer.

As test_chacha_only_config.py does for 2.28: mbedTLS 3.6 (Debian 13's source package, the release line of ESP-IDF 5)
is built with the board's user config file, firmware/platformio/include/mbedtls3_chacha_only.h (build_mbedtls.py
--line 3.6; cached in build/mbedtls-chacha-only-3.6). A client configured like Arduino's NetworkClientSecure -
mbedtls_ssl_config_defaults() and no cipher-suite call - then restricts BOTH lists: its ClientHello offers
0x1303 (TLS 1.3) and 0xCCA9 (TLS 1.2) and nothing else (plus mbedTLS's 0x00FF SCSV), read by the test's own proxy
and by OpenSSL's -trace; an `openssl s_server` that speaks TLS 1.3 picks 0x1303, one limited to TLS 1.2 picks
0xCCA9. src/chacha_tls13_check.cpp (the env's build-time check) compiles against that build."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fwtest_support import Pki, free_port, need_tool
from test_chacha_only_config import (
    CHACHA,
    PROBE_SRC,
    RENEGOTIATION_SCSV,
    Proxy,
    Server,
    _skip_or_fail,
    client_hello_suites,
    trace_client_hello_suites,
    trace_server_hello_suite,
)

REPO = Path(__file__).resolve().parents[2]
MBEDTLS_OUT = REPO / "build" / "mbedtls-chacha-only-3.6"
TLS13_CHACHA = 0x1303  # TLS_CHACHA20_POLY1305_SHA256


@pytest.fixture(scope="module")
def probe36(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_tool("cmake", "cmake")
    need_tool("cc", "gcc")
    need_tool("g++", "g++")
    started = time.monotonic()
    built = subprocess.run(
        [sys.executable, str(PROBE_SRC / "build_mbedtls.py"), "--line", "3.6", "--out", str(MBEDTLS_OUT), "-j2"],
        capture_output=True, text=True, check=False, timeout=1500)  # fmt: skip
    if built.returncode != 0:
        _skip_or_fail(f"mbedTLS 3.6 with the chacha-only user config could not be built: {built.stderr.strip()}")
    prefix = Path(built.stdout.strip().splitlines()[-1])
    print(f"mbedTLS 3.6 chacha-only: {built.stderr.strip()} in {time.monotonic() - started:.1f} s")
    build = tmp_path_factory.mktemp("chacha-only-probe-36")
    for argv in (["cmake", "-S", str(PROBE_SRC), "-B", str(build), f"-DMBEDTLS_CHACHA_ONLY_PREFIX={prefix}",
                  "-DCHACHA_ONLY_LINE=3.6"],  # also compiles src/chacha_tls13_check.cpp against that build
                 ["cmake", "--build", str(build), "-j2"]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return build / "chacha_only_probe"


@pytest.fixture
def s_server_factory(pki: Pki, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """openssl s_server accepting every TLS 1.2 suite and OpenSSL's TLS 1.3 suites; ``*extra``: e.g. -no_tls1_3."""
    need_tool("openssl", "openssl")
    started: list[Server] = []

    def start(*extra: str) -> Server:
        port = free_port()
        trace, log = tmp_path / f"s_server-{port}.trace", tmp_path / f"s_server-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pki.server_cert),
                 "-key", str(pki.server_key), "-cipher", "ALL:@SECLEVEL=0", "-naccept", "1", "-trace",
                 "-msgfile", str(trace), *extra],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.PIPE)  # fmt: skip
        server = Server(port, trace, log, proc)
        started.append(server)
        deadline = time.monotonic() + 10
        while "ACCEPT" not in log.read_text(errors="replace"):
            assert proc.poll() is None, f"openssl s_server exited:\n{log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, "openssl s_server did not listen within 10 s"
            time.sleep(0.05)
        return server

    yield start
    for server in started:
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        if server.proc.poll() is None:
            server.proc.terminate()
            try:
                server.proc.wait(10)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()


def _connect(probe: Path, pki: Pki, server: Server) -> tuple[subprocess.CompletedProcess[str], list[int], str]:
    proxy = Proxy(server.port)
    try:
        run = subprocess.run([str(probe), "connect", "127.0.0.1", str(proxy.port), str(pki.ca), "localhost"],
                             capture_output=True, text=True, check=False, timeout=30)
    finally:
        proxy.close()
    deadline = time.monotonic() + 10
    while server.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # -naccept 1: s_server exits after the connection, flushing the trace
    return run, client_hello_suites(bytes(proxy.client_bytes)), server.trace.read_text(errors="replace")


def test_default_list_is_exactly_the_two_chacha20_suites(probe36: Path) -> None:
    out = subprocess.run([str(probe36), "list"], capture_output=True, text=True, check=True).stdout
    assert [int(line.split()[0], 16) for line in out.splitlines()] == [TLS13_CHACHA, CHACHA]


def test_a_tls13_server_gets_both_lists_and_picks_0x1303(probe36: Path, pki: Pki, s_server_factory) -> None:
    server = s_server_factory()
    run, offered, trace = _connect(probe36, pki, server)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "version=TLSv1.3 suite=TLS1-3-CHACHA20-POLY1305-SHA256"
    print("ClientHello cipher_suites (proxy):", ", ".join(f"0x{s:04X}" for s in offered))
    assert offered == [TLS13_CHACHA, CHACHA, RENEGOTIATION_SCSV]
    assert trace_client_hello_suites(trace) == offered  # OpenSSL's own reading
    assert trace_server_hello_suite(trace) == TLS13_CHACHA
    assert "chacha-only probe" in server.log.read_text(errors="replace")  # decrypted by the server


def test_a_tls12_only_server_gets_the_same_hello_and_picks_0xcca9(probe36: Path, pki: Pki, s_server_factory) -> None:
    server = s_server_factory("-no_tls1_3")
    run, offered, trace = _connect(probe36, pki, server)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "version=TLSv1.2 suite=TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256"
    assert offered == [TLS13_CHACHA, CHACHA, RENEGOTIATION_SCSV]
    assert trace_server_hello_suite(trace) == CHACHA
