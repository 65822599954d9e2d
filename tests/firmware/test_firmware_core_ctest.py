"""The portable core's C++ unit tests (byte-exact MQTT 3.1.1 packets, exact payload sizes,
malformed input refused) built with g++ and run through ctest, and the ChaCha20 build guard."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fwtest_support import REPO, HostBuild

CORE = REPO / "firmware" / "platformio" / "lib" / "testbed_core" / "src"


def test_ctest_runs_core_unit_tests(host_build: HostBuild) -> None:
    proc = subprocess.run(
        ["ctest", "--test-dir", str(host_build.build_dir), "--output-on-failure"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "100% tests passed" in proc.stdout
    detail = subprocess.run([str(host_build.test_core)], capture_output=True, text=True, check=False)
    assert detail.returncode == 0, detail.stdout
    assert "0 Failures" in detail.stdout
    assert detail.stdout.count(":PASS") >= 25


def _compile_guard(tmp_path: Path, config: str | None) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "guard.cpp"
    source.write_text('#include "chacha_guard.h"\nint main() { return 0; }\n')
    argv = [
        "g++",
        "-std=c++17",
        "-fsyntax-only",
        "-DTESTBED_REQUIRE_CHACHAPOLY=1",
        f"-I{CORE}",
        f"-I{tmp_path}",
        str(source),
    ]
    if config is not None:
        (tmp_path / "cfg.h").write_text(config)
        argv.insert(1, '-DMBEDTLS_CONFIG_FILE="cfg.h"')
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_chacha_guard_compiles_with_debian_mbedtls(tmp_path: Path) -> None:
    proc = _compile_guard(tmp_path, None)
    assert proc.returncode == 0, proc.stderr


def test_chacha_guard_refuses_mbedtls_without_chachapoly(tmp_path: Path) -> None:
    # An mbedTLS configuration like a prebuilt Arduino-ESP32 SDK: key export but no ChaCha20-Poly1305.
    proc = _compile_guard(tmp_path, "#define MBEDTLS_SSL_EXPORT_KEYS\n#define MBEDTLS_CHACHA20_C\n")
    assert proc.returncode != 0
    assert "#error" in proc.stderr and "MBEDTLS_CHACHAPOLY_C" in proc.stderr
    assert "CONFIG_MBEDTLS_CHACHAPOLY_C" in proc.stderr


def test_vdevice_refuses_payload_below_minimum_naming_it(host_build: HostBuild) -> None:
    proc = subprocess.run(
        [str(host_build.vdevice), "--payload", "61", "--samples", "200"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "PayloadTooSmall" in lines[0] and "minimum of 62 bytes" in lines[0]


def test_vdevice_refuses_unknown_cipher_name(host_build: HostBuild, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("unused")
    proc = subprocess.run(
        [
            str(host_build.vdevice),
            "--transport",
            "tls",
            "--ca",
            str(ca),
            "--port",
            "1",
            "--ciphers",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            "--connect-timeout-ms",
            "200",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "UnknownCipher" in proc.stderr and "ECDHE-ECDSA-CHACHA20-POLY1305" in proc.stderr


def test_vdevice_reads_testbed_env_and_flags_win(host_build: HostBuild) -> None:
    env = {"PATH": "/usr/bin:/bin", "TESTBED_PAYLOAD": "61", "TESTBED_DEVICE_ID": "v1"}
    from_env = subprocess.run([str(host_build.vdevice)], capture_output=True, text=True, check=False, env=env)
    assert from_env.returncode == 2 and "minimum of 62 bytes" in from_env.stderr
    flag_wins = subprocess.run(
        [str(host_build.vdevice), "--payload", "65", "--port", "1", "--connect-timeout-ms", "100"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert flag_wins.returncode == 1 and "ConnectRefused" in flag_wins.stderr
    bad_env = subprocess.run(
        [str(host_build.vdevice)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "TESTBED_QOS": "3"},
    )
    assert bad_env.returncode == 2 and "TESTBED_QOS: expected an integer 0..2" in bad_env.stderr
