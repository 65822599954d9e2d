"""backends/platformio.py: argv builders, the generated header (checked by compiling it), board
environments from the real platformio.ini, registry failures, and `pio project config` offline."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends import platformio as pio
from orchestrator.errors import TestbedError, ToolError
from orchestrator.lab.firmware import settings_for_scenario
from tests.skips import skip_or_fail

PROJECT = Path(__file__).resolve().parents[2] / "firmware" / "platformio"
INI = (PROJECT / "platformio.ini").read_text()
CA = "-----BEGIN CERTIFICATE-----\nMIIB\"quote\\back\n-----END CERTIFICATE-----\n"
# What `pio run -e esp32dev` printed on a machine without access to the PlatformIO registry.
OFFLINE_OUTPUT = ("Processing esp32dev (platform: espressif32 @ ^6.5.0; board: esp32dev; framework: arduino, "
                  "espidf)\n----\nPlatform Manager: Installing espressif32 @ ^6.5.0\nHTTPClientError: \n")


def _settings(**overrides) -> pio.FirmwareSettings:
    values = dict(scenario="tls", transport="tls", port=8883,
                  ciphers_iana=("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",), payload=65, samples=200,
                  interval_ms=1000, qos=0, ca_pem=CA, username="publisher", password='p"w\\ä')
    values.update(overrides)
    return pio.FirmwareSettings(**values)


def test_argv_builders_are_exact() -> None:
    project = Path("/fw")
    assert pio.pio_build_argv("pio", project, "esp32dev") == [
        "pio", "run", "--project-dir", "/fw", "--environment", "esp32dev"]
    assert pio.upload_argv("pio", project, "esp32dev", "/dev/ttyUSB0") == [
        "pio", "run", "--project-dir", "/fw", "--environment", "esp32dev", "--target", "upload",
        "--upload-port", "/dev/ttyUSB0"]
    assert pio.monitor_argv("pio", project, "esp32dev", None) == [
        "pio", "device", "monitor", "--project-dir", "/fw", "--environment", "esp32dev", "--baud", "115200"]
    assert pio.monitor_argv("pio", project, "esp32dev", "/dev/ttyACM0", 921600)[-4:] == [
        "--baud", "921600", "--port", "/dev/ttyACM0"]
    assert pio.config_argv("pio", project) == ["pio", "project", "config", "--project-dir", "/fw"]


def test_board_environments_come_from_platformio_ini() -> None:
    assert pio.project_envs(INI) == ["esp32dev", "esp32dev-chacha-only", "esp32dev-arduino3", "esp32dev-idf5-tls13",
                                     "esp32dev-wificlientsecure", "native"]
    assert pio.known_board_env("esp32dev", INI) == "esp32dev"
    assert pio.known_board_env("esp32dev-chacha-only", INI) == "esp32dev-chacha-only"
    with pytest.raises(TestbedError, match="unknown board environment 'native'.*known: esp32dev, esp32dev-chacha-only, "
                                           "esp32dev-arduino3, esp32dev-idf5-tls13, esp32dev-wificlientsecure"):
        pio.known_board_env("native", INI)
    with pytest.raises(TestbedError, match="'esp32s3'"):
        pio.known_board_env("esp32s3", INI)


def test_esp32_env_takes_secrets_from_environment_only() -> None:
    for name in pio.SECRET_ENV:
        assert f"${{sysenv.{name}}}" in INI
    assert "framework = arduino, espidf" in INI
    assert "-DTESTBED_REQUIRE_CHACHAPOLY=1" in INI
    sdk = (PROJECT / "sdkconfig.defaults").read_text().splitlines()
    for option in ("CONFIG_MBEDTLS_CHACHA20_C=y", "CONFIG_MBEDTLS_POLY1305_C=y",
                   "CONFIG_MBEDTLS_CHACHAPOLY_C=y"):
        assert option in sdk
    assert "include/testbed_generated.h" in (PROJECT / ".gitignore").read_text().splitlines()


def test_payload_minimum_and_settings_validation() -> None:
    assert pio.payload_minimum("v1", 200) == 62
    assert pio.payload_minimum("e1", 10) == 60
    with pytest.raises(TestbedError, match="minimum for device id 'e1' and 200 samples is 62 B"):
        _settings(payload=61)
    with pytest.raises(TestbedError, match="needs a CA certificate"):
        _settings(ca_pem=None)
    with pytest.raises(TestbedError, match="qos must be one of 0, 1, 2, got 3"):
        _settings(qos=3)
    assert _settings(qos=2).qos == 2  # QoS 2 is the core's too (PUBREC/PUBREL/PUBCOMP)
    with pytest.raises(TestbedError, match="device id"):
        _settings(device_id='a"b')


def test_generated_header_compiles_to_the_same_bytes(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        skip_or_fail("g++ not installed (apt-get install -y g++)")
    settings = _settings()
    (tmp_path / "testbed_generated.h").write_text(pio.render_header(settings))
    (tmp_path / "main.cpp").write_text(
        '#include <cstdio>\n#include "testbed_generated.h"\n'
        'int main() { std::fputs(TESTBED_CA_PEM, stdout); std::fputs("|", stdout);'
        ' std::fputs(TESTBED_MQTT_PASSWORD, stdout); std::printf("|%s|%d|%d|%d|%s|%d\\n", TESTBED_CIPHERS,'
        ' TESTBED_BROKER_PORT, TESTBED_PAYLOAD_BYTES, TESTBED_TRANSPORT_TLS, TESTBED_SERVER_NAME,'
        ' TESTBED_REQUIRE_CHACHAPOLY); }\n')
    subprocess.run([gxx, "-std=c++17", "-Wall", "-Werror", "-o", str(tmp_path / "h"),
                    str(tmp_path / "main.cpp")], check=True, capture_output=True)
    printed = subprocess.run([str(tmp_path / "h")], check=True, capture_output=True).stdout.decode()
    assert printed == (f"{CA}|{settings.password}|TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256|8883|65|1|"
                       "broker|1\n")


def test_header_of_plain_scenario_has_no_tls_material() -> None:
    text = pio.render_header(_settings(transport="plain", port=1883, ciphers_iana=(), ca_pem=None,
                                       username=None, password=None))
    assert "#define TESTBED_TRANSPORT_TLS 0" in text
    assert "TESTBED_CA_PEM not set" in text and "TESTBED_REQUIRE_CHACHAPOLY" not in text


def test_write_header_is_private(tmp_path: Path) -> None:
    path = pio.write_header(_settings(), tmp_path)
    assert path == tmp_path / "include" / "testbed_generated.h"
    assert path.stat().st_mode & 0o077 == 0


def test_missing_secrets_named_and_nothing_written(tmp_path: Path) -> None:
    (tmp_path / "platformio.ini").write_text(INI)
    assert pio.missing_secrets({"TESTBED_WIFI_SSID": "x"}) == ["TESTBED_WIFI_PASSWORD",
                                                               "TESTBED_BROKER_HOST"]
    with pytest.raises(TestbedError,
                       match="set TESTBED_WIFI_SSID, TESTBED_WIFI_PASSWORD, TESTBED_BROKER_HOST"):
        pio.build(_settings(), board="esp32dev", project=tmp_path, env={})
    assert not (tmp_path / "include").exists()


def test_find_pio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(TestbedError, match="PlatformIO") as info:
        pio.find_pio([tmp_path])
    assert "pip install platformio" in (info.value.hint or "")
    fake = tmp_path / "pio"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert pio.find_pio([tmp_path]) == str(fake)


def test_registry_failure_becomes_clear_error() -> None:
    offline = ToolError(["pio", "run"], 1, OFFLINE_OUTPUT, "")
    err = pio.explain_failure(offline)
    assert "cannot reach its registry" in err.message
    assert "~/.platformio" in (err.hint or "")
    compile_error = ToolError(["pio", "run"], 1, "src/main.cpp:3:10: error: expected ';'", "")
    assert pio.explain_failure(compile_error) is compile_error


def test_settings_for_builtin_scenarios(tmp_path: Path) -> None:
    tls = settings_for_scenario("tls", tmp_path / "pki", payload=65, samples=200, interval_ms=1000, qos=0)
    assert tls.transport == "tls" and tls.port == 8883
    assert tls.ciphers_iana == ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",)
    assert tls.ca_pem is not None and tls.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    assert tls.username == "publisher" and tls.password
    plain = settings_for_scenario("plain", tmp_path / "pki2", payload=100, samples=200, interval_ms=500,
                                      qos=1)
    assert plain.transport == "plain" and plain.ciphers_iana == () and plain.ca_pem is None


def test_pio_project_config_accepts_platformio_ini() -> None:
    try:
        pio.find_pio()
    except TestbedError:
        skip_or_fail("PlatformIO not installed (pip install platformio; `make venv` installs it with .[esp32])")
    text = pio.check_config(PROJECT)
    assert "env:esp32dev" in text and "env:native" in text


def test_the_marker_pin_is_a_build_option_off_by_default() -> None:
    """issue 42: the power trace's marker GPIO (docs/energy.md), defined only when given, on an output GPIO."""
    assert "#define TESTBED_MARKER_PIN" not in pio.render_header(_settings())
    assert "#define TESTBED_MARKER_PIN 4\n" in pio.render_header(_settings(marker_pin=4))
    for pin in (7, 34, -1):  # the SPI flash's, an input-only one, none at all
        with pytest.raises(TestbedError, match=f"marker pin {pin}: not an ESP32 output GPIO"):
            _settings(marker_pin=pin)
