"""`testbed firmware`: the real ESP32 path (PlatformIO build, upload, serial monitor)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.backends import platformio
from orchestrator.cli.console import err, out
from orchestrator.lab.firmware import settings_for_scenario

app = typer.Typer(no_args_is_help=True,
                  help="Build, flash and watch the ESP32 firmware (PlatformIO, framework arduino + espidf).")

def _board_env_names() -> str:
    try:
        ini = (platformio.project_dir() / "platformio.ini").read_text()
    except OSError:
        return "see firmware/platformio/platformio.ini"
    return ", ".join(e for e in platformio.project_envs(ini) if e != "native")


Board = Annotated[str, typer.Option("--board", "--env",
                                     help=f"PlatformIO environment of firmware/platformio/platformio.ini: "
                                          f"{_board_env_names()} (`testbed firmware envs`: what each measures)")]


def default_pki_dir() -> Path:
    """The PKI of the live `testbed up` session, so the board trusts the broker that is running."""
    from orchestrator.lab.session import session_dir

    return session_dir() / "pki"


@app.command()
def build(
    scenario: Annotated[str, typer.Option(help="built-in scenario name or a YAML file")] = "tls",
    payload: Annotated[int, typer.Option(help="payload bytes per message")] = 65,
    samples: Annotated[int, typer.Option(help="messages per run")] = 200,
    interval_ms: Annotated[int, typer.Option("--interval-ms", help="publish interval")] = 1000,
    qos: Annotated[int, typer.Option(help="MQTT QoS 0 or 1")] = 0,
    device_id: Annotated[str, typer.Option("--device-id", help="the payload's \"d\"")
                         ] = platformio.DEFAULT_DEVICE_ID,
    board: Board = "esp32dev",
    pki_dir: Annotated[Path | None, typer.Option("--pki-dir", help="CA/credentials folder (default: the "
                                                                     "`testbed up` session's)")] = None,
) -> None:
    """Embed SCENARIO's settings and CA in include/testbed_generated.h and run `pio run`.

    WiFi and broker host come from TESTBED_WIFI_SSID, TESTBED_WIFI_PASSWORD, TESTBED_BROKER_HOST."""
    settings = settings_for_scenario(scenario, pki_dir or default_pki_dir(), payload=payload, samples=samples,
                                     interval_ms=interval_ms, qos=qos, device_id=device_id)
    header = platformio.build(settings, board=board)
    out.print(f"firmware built for {board}: scenario {settings.scenario}, {settings.transport}, port "
              f"{settings.port}, {settings.samples} x {settings.payload} B; settings in {header}")


@app.command()
def upload(
    port: Annotated[str, typer.Option(help="serial port of the board, e.g. /dev/ttyUSB0")],
    board: Board = "esp32dev",
) -> None:
    """Flash the last built firmware (`pio run -t upload`)."""
    platformio.upload(board=board, port=port)
    out.print(f"firmware uploaded to {port}")


@app.command()
def monitor(
    port: Annotated[str | None, typer.Option(help="serial port (default: PlatformIO picks one)")] = None,
    baud: Annotated[int, typer.Option(help="serial speed")] = platformio.DEFAULT_BAUD,
    board: Board = "esp32dev",
) -> None:
    """Show the board's serial lines (one per message, handshake ms, free heap, RSSI); Ctrl-C ends."""
    argv = platformio.monitor_command(board=board, port=port, baud=baud)
    err.print(f"[dim]{' '.join(argv)}[/]")
    platformio.run_attached(argv)


@app.command()
def envs() -> None:
    """List the board environments (offline, `pio project config`): platform, framework, what each measures."""
    for env in platformio.list_board_envs():
        out.print(f"[bold]{env.name}[/]\n  platform:  {env.platform}\n  framework: {', '.join(env.framework)}\n"
                  f"  measures:  {env.measures or '-'}")
