"""`testbed firmware`: the real ESP32 path (PlatformIO build, upload, serial monitor)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.backends import platformio
from orchestrator.cli.axis_options import checked, with_run_options
from orchestrator.cli.console import err, out
from orchestrator.errors import TestbedError
from orchestrator.lab.firmware import settings_for_scenario
from orchestrator.model.axes import AXES

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


MARKER_HELP = ("a GPIO the firmware drives high for 1 ms at each connection's start and each PUBLISH, a power "
               "trace's marker (docs/energy.md; default: none)")
BUILD_AXES = ("scenario", "payload", "samples", "interval_ms", "qos")  # `testbed run`'s options, from the table


def build(
    values: dict[str, Any],
    device_id: Annotated[str, typer.Option("--device-id", help="the payload's \"d\"")
                         ] = platformio.DEFAULT_DEVICE_ID,
    board: Board = "esp32dev",
    pki_dir: Annotated[Path | None, typer.Option("--pki-dir", help="CA/credentials folder (default: the "
                                                                     "`testbed up` session's)")] = None,
    old_interval_ms: Annotated[int | None, typer.Option("--interval-ms", hidden=True)] = None,
    marker_pin: Annotated[int | None, typer.Option(help=MARKER_HELP)] = None,
) -> None:
    """Embed SCENARIO's settings and CA in include/testbed_generated.h and run `pio run`.

    The run's options are `testbed run`'s (same names, units, defaults and ranges). WiFi and broker host come
    from TESTBED_WIFI_SSID, TESTBED_WIFI_PASSWORD, TESTBED_BROKER_HOST."""
    interval = values["interval_ms"]
    if old_interval_ms is not None:  # the option's name before it was `run`'s --interval (250ms, 1s)
        err.print(f"[yellow]--interval-ms is deprecated[/]: use --interval {old_interval_ms}ms", highlight=False)
        interval = checked(AXES, {"interval_ms": float(old_interval_ms)}, "options")["interval_ms"]
    if interval != int(interval):
        raise TestbedError(f"invalid options: interval {interval:g} ms: the firmware publishes every whole "
                           "millisecond", hint="e.g. --interval 250ms or --interval 1s")
    settings = settings_for_scenario(values["scenario"], pki_dir or default_pki_dir(), payload=values["payload"],
                                     samples=values["samples"], interval_ms=int(interval), qos=values["qos"],
                                     device_id=device_id, marker_pin=marker_pin)
    header = platformio.build(settings, board=board)
    out.print(f"firmware built for {board}: scenario {settings.scenario}, {settings.transport}, port "
              f"{settings.port}, {settings.samples} x {settings.payload} B"
              + (f", marker on GPIO {marker_pin}" if marker_pin is not None else "") + f"; settings in {header}")


app.command("build")(with_run_options(build, AXES, BUILD_AXES))


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
