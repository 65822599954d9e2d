"""PlatformIO: build, upload and monitor the ESP32 firmware in firmware/platformio.

The scenario (transport, port, cipher suites), the run parameters and the throwaway CA certificate
reach the firmware through a generated header, include/testbed_generated.h (gitignored). WiFi
SSID/password and the broker host come from environment variables that platformio.ini turns into
build flags: they are checked for presence here, never read into files or printed.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator import paths
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError, ToolError
from orchestrator.model.axes import AXES, MAX_PAYLOAD
from orchestrator.model.rules import payload_min_size

GENERATED_HEADER = Path("include") / "testbed_generated.h"
SECRET_ENV = ("TESTBED_WIFI_SSID", "TESTBED_WIFI_PASSWORD", "TESTBED_BROKER_HOST")
DEFAULT_BAUD: int = AXES["baud"].default
DEFAULT_DEVICE_ID = "e1"
TOPIC = "testbed/sensors"
SERVER_NAME = "broker"  # a DNS SAN of the broker certificate; mbedTLS 2.28 does not match IP SANs

_REGISTRY_PATTERNS = re.compile(
    r"HTTPClientError|Could not resolve host|Failed to establish a new connection|Max retries exceeded|"
    r"ConnectionError|registry\.platformio\.org|Temporary failure in name resolution|Network is unreachable|"
    r"InternetConnectionError|api\.registry", re.IGNORECASE)


MAX_OUTPUT_GPIO = 33  # ESP32 Series Datasheet, pin definitions: 34-39 are input-only, 6-11 the SPI flash's


@dataclass(frozen=True)
class FirmwareSettings:
    """Everything the firmware is built with, apart from the WiFi/broker-host secrets."""

    scenario: str
    transport: Literal["plain", "tls"]
    port: int
    ciphers_iana: tuple[str, ...]
    payload: int
    samples: int
    interval_ms: int
    qos: int
    device_id: str = DEFAULT_DEVICE_ID
    topic: str = TOPIC
    server_name: str = SERVER_NAME
    ca_pem: str | None = None
    username: str | None = None
    password: str | None = None
    client_cert_pem: str | None = None
    client_key_pem: str | None = None
    marker_pin: int | None = None  # the power trace's marker GPIO (docs/energy.md); None: no marker (the default)

    def __post_init__(self) -> None:
        if self.transport == "tls" and (not self.ca_pem or not self.ciphers_iana):
            raise TestbedError(f"scenario {self.scenario}: TLS firmware needs a CA certificate and "
                               "cipher suites")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", self.device_id):
            raise TestbedError(f"device id {self.device_id!r}: use 1..32 characters of A-Z a-z 0-9 _ . -")
        levels = AXES["qos"].choices or ()
        if self.qos not in levels:  # the run's own axis: the core speaks every level it lists
            raise TestbedError(f"qos must be one of {', '.join(map(str, levels))}, got {self.qos}")
        if self.marker_pin is not None and (not 0 <= self.marker_pin <= MAX_OUTPUT_GPIO or 6 <= self.marker_pin <= 11):
            raise TestbedError(f"marker pin {self.marker_pin}: not an ESP32 output GPIO (0..5, 12..{MAX_OUTPUT_GPIO})",
                               hint="GPIO 6..11 drive the flash and 34..39 are inputs only; pick one your board "
                                    "leaves free")
        if self.samples < 1 or self.interval_ms < 0:
            raise TestbedError("samples must be >= 1 and interval-ms >= 0")
        minimum = payload_minimum(self.device_id, self.samples)
        if not minimum <= self.payload <= MAX_PAYLOAD:
            raise TestbedError(f"payload {self.payload} B is outside {minimum}..{MAX_PAYLOAD} B (the minimum for "
                               f"device id {self.device_id!r} and {self.samples} samples is {minimum} B)")


def payload_minimum(device_id: str, samples: int) -> int:
    """The firmware core's payload_min_size (worst-case field widths), as the run's model has it."""
    return payload_min_size(samples, device_id)


def project_dir() -> Path:
    """firmware/platformio of the checkout; from an installed package, its copy in the cache folder, brought up to
    date (PlatformIO writes its builds, and we the generated header, into the project: never into the package)."""
    source = paths.tree() / "firmware" / "platformio"
    if paths.checkout() is not None:
        return source
    dest = paths.cache_dir() / "firmware" / "platformio"
    shutil.copytree(source, dest, dirs_exist_ok=True)
    return dest


def project_envs(ini_text: str) -> list[str]:
    """The [env:NAME] sections of a platformio.ini."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(ini_text)
    return [s.split(":", 1)[1] for s in parser.sections() if s.startswith("env:")]


@dataclass(frozen=True)
class BoardEnv:
    """One board env as PlatformIO computes it (extends and ${...} resolved)."""

    name: str
    platform: str
    framework: tuple[str, ...]
    build_flags: tuple[str, ...]
    measures: str  # the env's `custom_measures`: what a cell built with it can and cannot measure


def parse_board_envs(config_json: str) -> list[BoardEnv]:
    """The board envs (not `native`) of `pio project config --json-output`."""
    envs = []
    for section, options in json.loads(config_json):
        if not section.startswith("env:") or section == "env:native":
            continue
        values = dict(options)
        framework = values.get("framework", [])
        envs.append(BoardEnv(section.split(":", 1)[1], str(values.get("platform", "")),
                             tuple(framework if isinstance(framework, list) else [framework]),
                             tuple(values.get("build_flags", [])), str(values.get("custom_measures", ""))))
    return envs


def list_board_envs(project: Path | None = None, timeout: float = 120) -> list[BoardEnv]:
    """`pio project config --json-output`, offline: every board env with its platform and framework."""
    argv = [*config_argv(find_pio(), project or project_dir()), "--json-output"]
    return parse_board_envs(_run_pio(argv, timeout=timeout))


def known_board_env(board: str, ini_text: str) -> str:
    envs = [e for e in project_envs(ini_text) if e != "native"]
    if board not in envs:
        raise TestbedError(f"unknown board environment {board!r} in firmware/platformio/platformio.ini; "
                           f"known: {', '.join(envs) or 'none'}")
    return board


def find_pio(search: Sequence[Path] | None = None) -> str:
    """The PlatformIO CLI: `pio` or `platformio` on PATH or next to this Python."""
    for name in ("pio", "platformio"):
        found = which(name)
        if found:
            return found
    for folder in search if search is not None else [Path(sys.executable).parent]:
        for name in ("pio", "platformio"):
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise TestbedError("PlatformIO (`pio`) is not installed",
                       hint="pip install platformio (it then downloads the espressif32 platform and "
                            "toolchain from its registry on first build)")


def pio_build_argv(pio: str, project: Path, board: str) -> list[str]:
    return [pio, "run", "--project-dir", str(project), "--environment", board]


def upload_argv(pio: str, project: Path, board: str, port: str) -> list[str]:
    return [pio, "run", "--project-dir", str(project), "--environment", board, "--target", "upload",
            "--upload-port", port]


def monitor_argv(pio: str, project: Path, board: str, port: str | None,
                 baud: int = DEFAULT_BAUD) -> list[str]:
    argv = [pio, "device", "monitor", "--project-dir", str(project), "--environment", board,
            "--baud", str(baud)]
    if port:
        argv += ["--port", port]
    return argv


def config_argv(pio: str, project: Path) -> list[str]:
    return [pio, "project", "config", "--project-dir", str(project)]


def missing_secrets(env: Mapping[str, str]) -> list[str]:
    return [name for name in SECRET_ENV if not env.get(name)]


def _c_string(text: str) -> str:
    """A C string literal; multi-line text (PEM) as one literal per line."""
    def esc(s: str) -> str:
        out = []
        for ch in s:
            if ch in '\\"':
                out.append("\\" + ch)
            elif ch == "\n":
                out.append("\\n")
            elif 0x20 <= ord(ch) < 0x7F:
                out.append(ch)
            else:
                out.extend(f"\\x{b:02x}\"\"" for b in ch.encode())
        return "".join(out)

    lines = text.splitlines(keepends=True) or [""]
    if len(lines) == 1:
        return f'"{esc(lines[0])}"'
    return "\n".join(f'    "{esc(line)}"' for line in lines)


def _define(name: str, value: str | int | None) -> str:
    if value is None:
        return f"// {name} not set\n"
    if isinstance(value, int):
        return f"#define {name} {value}\n"
    literal = _c_string(value)
    if "\n" not in literal:
        return f"#define {name} {literal}\n"
    continued = literal.replace("\n", " \\\n")
    return f"#define {name} \\\n{continued}\n"


def render_header(s: FirmwareSettings) -> str:
    """The generated header's text (pure)."""
    parts = [
        "// Generated by `testbed firmware build`; do not edit, do not commit (gitignored).\n",
        f"// scenario: {s.scenario}\n",
        "#pragma once\n\n",
        _define("TESTBED_SCENARIO", s.scenario),
        _define("TESTBED_TRANSPORT_TLS", 1 if s.transport == "tls" else 0),
        _define("TESTBED_BROKER_PORT", s.port),
        _define("TESTBED_CIPHERS", ",".join(s.ciphers_iana) if s.ciphers_iana else None),
        _define("TESTBED_SERVER_NAME", s.server_name),
        _define("TESTBED_PAYLOAD_BYTES", s.payload),
        _define("TESTBED_SAMPLES", s.samples),
        _define("TESTBED_INTERVAL_MS", s.interval_ms),
        _define("TESTBED_QOS", s.qos),
        _define("TESTBED_DEVICE_ID", s.device_id),
        _define("TESTBED_TOPIC", s.topic),
        _define("TESTBED_MQTT_USERNAME", s.username),
        _define("TESTBED_MQTT_PASSWORD", s.password),
        _define("TESTBED_CA_PEM", s.ca_pem),
        _define("TESTBED_CLIENT_CERT_PEM", s.client_cert_pem),
        _define("TESTBED_CLIENT_KEY_PEM", s.client_key_pem),
        _define("TESTBED_MARKER_PIN", s.marker_pin),
    ]
    if any("chacha20" in c.lower() for c in s.ciphers_iana):
        parts.append("#define TESTBED_REQUIRE_CHACHAPOLY 1\n")
    return "".join(parts)


def write_header(settings: FirmwareSettings, project: Path) -> Path:
    path = project / GENERATED_HEADER
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".h.tmp")
    tmp.write_text(render_header(settings))
    tmp.chmod(0o600)  # holds the throwaway MQTT password
    tmp.replace(path)
    return path


def explain_failure(exc: ToolError) -> TestbedError:
    """A registry/network failure becomes a clear error; anything else keeps pio's own output."""
    text = f"{exc.stdout}\n{exc.stderr}"
    if _REGISTRY_PATTERNS.search(text):
        return TestbedError("PlatformIO cannot reach its registry to download the espressif32 "
                            "platform/toolchain",
                            hint="build on a machine with internet access once (packages are cached in "
                                 "~/.platformio), or copy ~/.platformio from such a machine",
                            evidence=exc.evidence)
    return exc


def _run_pio(argv: list[str], *, timeout: float | None) -> str:
    try:
        return run(argv, timeout=timeout).stdout
    except ToolError as exc:
        raise explain_failure(exc) from exc


def build(settings: FirmwareSettings, *, board: str, project: Path | None = None,
          env: Mapping[str, str] | None = None, timeout: float | None = 3600) -> Path:
    """Writes the generated header and runs `pio run -e BOARD`; returns the header path."""
    project = project or project_dir()
    known_board_env(board, (project / "platformio.ini").read_text())
    missing = missing_secrets(env if env is not None else os.environ)
    if missing:
        raise TestbedError(f"set {', '.join(missing)} in the environment before building the firmware",
                           hint="export TESTBED_WIFI_SSID=... TESTBED_WIFI_PASSWORD=... "
                                "TESTBED_BROKER_HOST=<this machine's LAN address>; they become build flags "
                                "and are never written to files")
    pio = find_pio()
    header = write_header(settings, project)
    _run_pio(pio_build_argv(pio, project, board), timeout=timeout)
    return header


def upload(*, board: str, port: str, project: Path | None = None, timeout: float | None = 1800) -> None:
    project = project or project_dir()
    known_board_env(board, (project / "platformio.ini").read_text())
    if not (project / GENERATED_HEADER).exists():
        raise TestbedError("no firmware configured yet",
                           hint="run `testbed firmware build --scenario tls` first")
    _run_pio(upload_argv(find_pio(), project, board, port), timeout=timeout)


def monitor_command(*, board: str, port: str | None, baud: int = DEFAULT_BAUD,
                    project: Path | None = None) -> list[str]:
    """The argv of an interactive serial monitor (the CLI runs it attached to the terminal)."""
    project = project or project_dir()
    known_board_env(board, (project / "platformio.ini").read_text())
    return monitor_argv(find_pio(), project, board, port, baud)


def check_config(project: Path | None = None, timeout: float = 120) -> str:
    """`pio project config`: parses platformio.ini offline."""
    return _run_pio(config_argv(find_pio(), project or project_dir()), timeout=timeout)


def run_attached(argv: list[str]) -> None:
    """Runs an interactive program (the serial monitor) on this terminal; run() would capture it."""
    try:
        code = subprocess.call(argv)
    except FileNotFoundError as exc:
        raise TestbedError(f"program not found: {argv[0]}") from exc
    except KeyboardInterrupt:
        return
    if code != 0:
        raise TestbedError(f"{' '.join(argv[:3])} exited with {code}")
