"""The ChaCha-only build variant (PlatformIO env esp32dev-chacha-only) proven on this computer.

The ESP32 build cannot run here, so mbedTLS 2.28 (Debian's source package, ESP-IDF 4.4's release line) is
built with the very user config file the board uses, firmware/platformio/include/mbedtls_chacha_only.h
(build_mbedtls.py; cached in build/mbedtls-chacha-only, ~20 s cold). A client configured like Arduino's
WiFiClientSecure - mbedtls_ssl_config_defaults() and no cipher-suite call - then connects to an
`openssl s_server` that accepts every suite, through a TCP proxy in this test. Two independent readers of
the ClientHello: the proxy's own parse of the bytes and OpenSSL's -trace. The same probe against the
system's libmbedtls-dev is the control (mbedTLS's default list, AES suites included).
The #error / static_assert guards are compiled against the system's mbedTLS 2.28 headers."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from fwtest_support import Pki, free_port, need_tool

from tests.skips import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
FW = REPO / "firmware" / "platformio"
PROBE_SRC = FW / "host" / "chacha_only"
USER_CONFIG = FW / "include" / "mbedtls_chacha_only.h"
CHECK_SRC = FW / "src" / "chacha_only_check.cpp"
MBEDTLS_OUT = REPO / "build" / "mbedtls-chacha-only"

CHACHA = 0xCCA9  # TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
RENEGOTIATION_SCSV = 0x00FF  # TLS_EMPTY_RENEGOTIATION_INFO_SCSV, always appended by mbedTLS 2.28
AES_GCM = {0xC02B, 0xC02C}  # TLS_ECDHE_ECDSA_WITH_AES_{128,256}_GCM_*


def _skip_or_fail(message: str) -> NoReturn:
    skip_or_fail(message)


@dataclass(frozen=True)
class Probes:
    chacha_only: Path
    default: Path | None  # the same program on the system's libmbedtls (control)


@pytest.fixture(scope="session")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    need_tool("cmake", "cmake")
    need_tool("cc", "gcc")
    need_tool("g++", "g++")
    started = time.monotonic()
    built = subprocess.run(
        [sys.executable, str(PROBE_SRC / "build_mbedtls.py"), "--out", str(MBEDTLS_OUT), "-j2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if built.returncode != 0:
        _skip_or_fail(f"mbedTLS 2.28 with the chacha-only user config could not be built: {built.stderr.strip()}")
    prefix = Path(built.stdout.strip().splitlines()[-1])
    print(f"mbedTLS chacha-only: {built.stderr.strip()} in {time.monotonic() - started:.1f} s")
    build = tmp_path_factory.mktemp("chacha-only-probe")
    for argv in (
        ["cmake", "-S", str(PROBE_SRC), "-B", str(build), f"-DMBEDTLS_CHACHA_ONLY_PREFIX={prefix}"],
        ["cmake", "--build", str(build), "-j2"],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    default = build / "default_probe"
    return Probes(build / "chacha_only_probe", default if default.exists() else None)


# ---- readers of the ClientHello -------------------------------------------------------------------------


def client_hello_suites(stream: bytes) -> list[int]:
    """The cipher_suites of the first ClientHello in a client->server TCP byte stream (RFC 5246 7.4.1.2)."""
    handshake = b""
    i = 0
    while i + 5 <= len(stream):
        content_type, length = stream[i], int.from_bytes(stream[i + 3 : i + 5], "big")
        assert content_type == 22, f"first record is content type {content_type}, not handshake"
        handshake += stream[i + 5 : i + 5 + length]
        i += 5 + length
        if len(handshake) >= 4 and len(handshake) >= 4 + int.from_bytes(handshake[1:4], "big"):
            break
    assert handshake[:1] == b"\x01", "first handshake message is not a ClientHello"
    body = handshake[4 : 4 + int.from_bytes(handshake[1:4], "big")]
    p = 2 + 32  # client_version, random
    p += 1 + body[p]  # session_id
    n = int.from_bytes(body[p : p + 2], "big")
    suites = body[p + 2 : p + 2 + n]
    assert len(suites) == n and n % 2 == 0, "truncated cipher_suites"
    return [int.from_bytes(suites[k : k + 2], "big") for k in range(0, n, 2)]


def trace_client_hello_suites(trace: str) -> list[int]:
    """cipher_suites of the ClientHello as `openssl s_server -trace` printed them."""
    m = re.search(r"ClientHello, Length=\d+.*?cipher_suites \(len=\d+\)\n(.*?)\n\s*compression_methods", trace, re.S)
    assert m, f"no ClientHello cipher_suites in the trace:\n{trace[:3000]}"
    pairs = re.findall(r"\{0x([0-9A-Fa-f]{2}), 0x([0-9A-Fa-f]{2})\}", m.group(1))
    return [int(a, 16) << 8 | int(b, 16) for a, b in pairs]


def trace_server_hello_suite(trace: str) -> int:
    m = re.search(r"ServerHello, Length=\d+.*?cipher_suite \{0x([0-9A-Fa-f]{2}), 0x([0-9A-Fa-f]{2})\}", trace, re.S)
    assert m, "no ServerHello cipher_suite in the trace"
    return int(m.group(1), 16) << 8 | int(m.group(2), 16)


class Proxy:
    """Forwards one TCP connection 127.0.0.1:port -> upstream and keeps the client->server bytes."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.client_bytes = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(20)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, keep: bytearray | None) -> None:
        try:
            while data := src.recv(65536):
                if keep is not None:
                    keep.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _serve(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        with client, socket.create_connection(("127.0.0.1", self.upstream_port), timeout=20) as upstream:
            back = threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True)
            back.start()
            self._pump(client, upstream, self.client_bytes)
            back.join(20)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(20)


@dataclass
class Server:
    port: int
    trace: Path
    log: Path
    proc: subprocess.Popen[bytes]


@pytest.fixture
def s_server(pki: Pki, tmp_path: Path) -> Iterator[Server]:
    """openssl s_server accepting every TLS 1.2 suite (-cipher ALL) with an ECDSA P-256 certificate."""
    need_tool("openssl", "openssl")
    port = free_port()
    trace = tmp_path / "s_server.trace"
    log = tmp_path / "s_server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(pki.server_cert),
             "-key", str(pki.server_key), "-cipher", "ALL:@SECLEVEL=0", "-naccept", "1", "-trace",
             "-msgfile", str(trace)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,  # EOF on stdin would end the session
        )  # fmt: skip
    deadline = time.monotonic() + 10
    while "ACCEPT" not in log.read_text(errors="replace"):  # printed once it listens
        assert proc.poll() is None, f"openssl s_server exited:\n{log.read_text(errors='replace')}"
        assert time.monotonic() < deadline, "openssl s_server did not listen within 10 s"
        time.sleep(0.05)
    yield Server(port, trace, log, proc)
    assert proc.stdin is not None
    proc.stdin.close()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _connect_through_proxy(probe: Path, pki: Pki, server: Server) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    proxy = Proxy(server.port)
    try:
        run = subprocess.run(
            [str(probe), "connect", "127.0.0.1", str(proxy.port), str(pki.ca), "localhost"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
    finally:
        proxy.close()
    return run, client_hello_suites(bytes(proxy.client_bytes))


def _wait_trace(server: Server) -> str:
    deadline = time.monotonic() + 10
    while server.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # -naccept 1: s_server exits after the connection, flushing the trace
    return server.trace.read_text(errors="replace")


# ---- tests ----------------------------------------------------------------------------------------------


def test_default_cipher_suite_list_is_only_chacha20_poly1305(probes: Probes) -> None:
    out = subprocess.run([str(probes.chacha_only), "list"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["0xCCA9 TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256"]
    if probes.default is not None:  # control: the system's mbedTLS 2.28 keeps its long default list
        control = subprocess.run([str(probes.default), "list"], capture_output=True, text=True, check=True).stdout
        ids = {int(line.split()[0], 16) for line in control.splitlines()}
        assert CHACHA in ids and AES_GCM <= ids and len(ids) > 20


def test_wificlientsecure_style_client_offers_only_cca9_on_the_wire(probes: Probes, pki: Pki, s_server: Server) -> None:
    run, offered = _connect_through_proxy(probes.chacha_only, pki, s_server)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "version=TLSv1.2 suite=TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256"
    print("ClientHello cipher_suites (proxy):", ", ".join(f"0x{s:04X}" for s in offered))
    assert offered == [CHACHA, RENEGOTIATION_SCSV]
    trace = _wait_trace(s_server)
    assert trace_client_hello_suites(trace) == [CHACHA, RENEGOTIATION_SCSV]  # OpenSSL's own reading
    assert trace_server_hello_suite(trace) == CHACHA
    assert "chacha-only probe" in s_server.log.read_text(errors="replace")  # decrypted by the server


def test_control_default_mbedtls_offers_aes_too(probes: Probes, pki: Pki, s_server: Server) -> None:
    """Same client on the system's mbedTLS: the proxy's parse sees the long list, so the test above is not
    blind to AES suites."""
    if probes.default is None:
        _skip_or_fail("system libmbedtls not found for the control probe: apt-get install -y libmbedtls-dev")
    run, offered = _connect_through_proxy(probes.default, pki, s_server)
    assert run.returncode == 0, run.stderr
    print(f"control ClientHello: {len(offered)} suites, first", ", ".join(f"0x{s:04X}" for s in offered[:4]))
    assert CHACHA in offered and AES_GCM <= set(offered) and len(offered) > 20
    assert trace_client_hello_suites(_wait_trace(s_server)) == offered


# ---- the build guards (system mbedTLS 2.28 headers, no ESP-IDF) -----------------------------------------


def _compile(tmp_path: Path, source: str | Path, *defines: str) -> subprocess.CompletedProcess[str]:
    gxx = shutil.which("g++")
    if gxx is None:
        _skip_or_fail("g++ not installed (apt-get install -y g++)")
    if not Path("/usr/include/mbedtls/config.h").is_file():
        _skip_or_fail("mbedTLS 2.28 headers not installed (apt-get install -y libmbedtls-dev)")
    if isinstance(source, str):
        path = tmp_path / "tu.cpp"
        path.write_text(source)
        source = path
    argv = [gxx, "-std=gnu++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}",
            f"-I{USER_CONFIG.parent}", *(f"-D{d}" for d in defines), str(source)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, check=False)


ANY_MBEDTLS_USER = "#include <mbedtls/ssl.h>\nint main() { return 0; }\n"
WITH_CONFIG = ("TESTBED_CHACHA_ONLY=1", 'MBEDTLS_USER_CONFIG_FILE="mbedtls_chacha_only.h"')


def test_check_file_compiles_with_the_user_config(tmp_path: Path) -> None:
    proc = _compile(tmp_path, CHECK_SRC, *WITH_CONFIG)
    assert proc.returncode == 0, proc.stderr


def test_error_when_the_list_is_removed_from_the_user_config(tmp_path: Path) -> None:
    text = USER_CONFIG.read_text()
    without = re.sub(r"^#define MBEDTLS_SSL_CIPHERSUITES .*$", "", text, flags=re.M)
    assert without != text
    (tmp_path / "no_list.h").write_text(without)
    proc = _compile(tmp_path, ANY_MBEDTLS_USER, 'MBEDTLS_USER_CONFIG_FILE="no_list.h"')
    assert proc.returncode != 0
    assert "testbed chacha-only: MBEDTLS_SSL_CIPHERSUITES is not set" in proc.stderr


def test_error_when_mbedtls_lacks_chachapoly(tmp_path: Path) -> None:
    # What an sdkconfig without CONFIG_MBEDTLS_CHACHAPOLY_C gives: the option is off when the file is read.
    (tmp_path / "no_chachapoly.h").write_text(f'#undef MBEDTLS_CHACHAPOLY_C\n#include "{USER_CONFIG}"\n')
    proc = _compile(tmp_path, ANY_MBEDTLS_USER, 'MBEDTLS_USER_CONFIG_FILE="no_chachapoly.h"')
    assert proc.returncode != 0
    assert "testbed chacha-only: mbedTLS lacks MBEDTLS_CHACHAPOLY_C" in proc.stderr


def test_error_when_the_env_sets_chacha_only_but_the_user_config_is_not_passed(tmp_path: Path) -> None:
    proc = _compile(tmp_path, CHECK_SRC, "TESTBED_CHACHA_ONLY=1")
    assert proc.returncode != 0
    assert "did not include include/mbedtls_chacha_only.h" in proc.stderr


def test_error_when_the_list_holds_more_than_chacha(tmp_path: Path) -> None:
    text = USER_CONFIG.read_text().replace(
        "#define MBEDTLS_SSL_CIPHERSUITES MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "#define MBEDTLS_SSL_CIPHERSUITES MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,"
        "MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    )
    (tmp_path / "two.h").write_text(text)
    proc = _compile(tmp_path, CHECK_SRC, "TESTBED_CHACHA_ONLY=1", 'MBEDTLS_USER_CONFIG_FILE="two.h"')
    assert proc.returncode != 0
    assert "MBEDTLS_SSL_CIPHERSUITES must be exactly" in proc.stderr


def test_esp32_env_passes_the_user_config_to_every_compile() -> None:
    """platformio.ini's env: the flags the host build above used (PlatformIO's espidf builder applies
    build_flags to the ESP-IDF components, mbedtls included)."""
    import configparser

    ini = configparser.ConfigParser(interpolation=None, strict=False)
    ini.read(FW / "platformio.ini")
    env = ini["env:esp32dev-chacha-only"]
    assert env["extends"] == "env:esp32dev"
    flags = env["build_flags"].split()
    assert "-DTESTBED_CHACHA_ONLY=1" in flags
    assert "-I$PROJECT_INCLUDE_DIR" in flags
    assert "'-DMBEDTLS_USER_CONFIG_FILE=\"mbedtls_chacha_only.h\"'" in flags
