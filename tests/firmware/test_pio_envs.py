"""Every env of firmware/platformio/platformio.ini is accepted by PlatformIO itself, offline: `pio project
config --lint` and `--json-output` (the ESP32 platforms and toolchains cannot be downloaded here, so this
is the check that a board owner's `pio run -e ENV` starts from a valid configuration), and
`testbed firmware envs` lists each with its platform, framework and what it measures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.backends import platformio as pio
from orchestrator.errors import TestbedError
from tests.skips import skip_or_fail

PROJECT = Path(__file__).resolve().parents[2] / "firmware" / "platformio"
PIOARDUINO = "https://github.com/pioarduino/platform-espressif32/releases/download/55.03.35/platform-espressif32.zip"
SECRETS = ['-DTESTBED_WIFI_SSID=""', '-DTESTBED_WIFI_PASSWORD=""', '-DTESTBED_BROKER_HOST=""']
# env: (platform, framework, build flags it must have, build flags it must not have)
EXPECTED = {
    "esp32dev": ("espressif32 @ ^6.5.0", ["arduino", "espidf"], ["-DTESTBED_REQUIRE_CHACHAPOLY=1"],
                 ["-DTESTBED_CHACHA_ONLY=1", "-DTESTBED_WIFICLIENTSECURE=1"]),
    "esp32dev-chacha-only": ("espressif32 @ ^6.5.0", ["arduino", "espidf"],
                             ["-DTESTBED_CHACHA_ONLY=1", "'-DMBEDTLS_USER_CONFIG_FILE=\"mbedtls_chacha_only.h\"'"],
                             ["-DTESTBED_WIFICLIENTSECURE=1"]),
    "esp32dev-arduino3": (PIOARDUINO, ["arduino"], [], ["-DTESTBED_REQUIRE_CHACHAPOLY=1", "-DTESTBED_CHACHA_ONLY=1"]),
    "esp32dev-idf5-tls13": (PIOARDUINO, ["arduino", "espidf"],
                            ["-DTESTBED_REQUIRE_CHACHAPOLY=1", "-DTESTBED_CHACHA_TLS13=1",
                             "'-DMBEDTLS_USER_CONFIG_FILE=\"mbedtls3_chacha_only.h\"'"],
                            ["-DTESTBED_CHACHA_ONLY=1"]),
    "esp32dev-wificlientsecure": ("espressif32 @ ^6.5.0", ["arduino", "espidf"],
                                  ["-DTESTBED_CHACHA_ONLY=1", "-DTESTBED_WIFICLIENTSECURE=1",
                                   "'-DMBEDTLS_USER_CONFIG_FILE=\"mbedtls_chacha_only.h\"'"], []),
}


def _pio() -> str:
    try:
        return pio.find_pio([Path(sys.executable).parent])
    except TestbedError as exc:  # only "not installed": any other error is the test's failure
        skip_or_fail(f"PlatformIO not installed: {exc.message} (`make venv` installs it with .[esp32])")


def _config(*extra: str) -> subprocess.CompletedProcess[str]:
    # No network: PLATFORMIO_* offline, and the secrets empty so nothing private is printed.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PLATFORMIO_SETTING_ENABLE_TELEMETRY": "No",
           "PLATFORMIO_SETTING_CHECK_PLATFORMIO_INTERVAL": "3650"}
    return subprocess.run([_pio(), "project", "config", "--project-dir", str(PROJECT), *extra],
                          capture_output=True, text=True, check=False, timeout=120, env=env)


def test_platformio_lints_the_project_clean() -> None:
    proc = _config("--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "free from linting errors" in proc.stdout


def test_each_env_has_its_platform_framework_and_flags() -> None:
    proc = _config("--json-output")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    envs = {e.name: e for e in pio.parse_board_envs(proc.stdout)}
    assert list(envs) == list(EXPECTED)
    for name, (platform, framework, present, absent) in EXPECTED.items():
        env = envs[name]
        assert env.platform == platform, name
        assert list(env.framework) == framework, name
        assert "-std=gnu++17" in env.build_flags, name
        for flag in [*present, *(f"'{s}'" for s in SECRETS)]:
            assert flag in env.build_flags, (name, flag)
        for flag in absent:
            assert flag not in env.build_flags, (name, flag)
        assert env.measures, f"{name}: no custom_measures"
    assert "no key log" in envs["esp32dev-wificlientsecure"].measures
    assert "key log" in envs["esp32dev"].measures
    # the IDF 5 env reads its own sdkconfig defaults (the IDF 4.4 file is not for it)
    sections = dict(json.loads(proc.stdout))
    tls13 = dict(sections["env:esp32dev-idf5-tls13"])
    assert tls13["board_build.cmake_extra_args"] == "-DSDKCONFIG_DEFAULTS=sdkconfig.idf5.defaults"
    defaults = (PROJECT / "sdkconfig.idf5.defaults").read_text().splitlines()
    for option in ("CONFIG_MBEDTLS_SSL_PROTO_TLS1_3=y", "CONFIG_MBEDTLS_CHACHA20_C=y", "CONFIG_MBEDTLS_POLY1305_C=y",
                   "CONFIG_MBEDTLS_CHACHAPOLY_C=y", "CONFIG_MBEDTLS_SSL_CID_PADDING_GRANULARITY=16"):
        assert option in defaults


def test_testbed_firmware_envs_lists_them() -> None:
    _pio()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "firmware", "envs"],
                          capture_output=True, text=True, check=False, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name, (platform, framework, _, _) in EXPECTED.items():
        block = proc.stdout.split(name + "\n", 1)[1].split("\n  measures:", 1)[0]
        assert f"platform:  {platform}" in block and f"framework: {', '.join(framework)}" in block, block
