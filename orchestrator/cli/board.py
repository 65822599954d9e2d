"""`testbed board`: check a board before a sweep (check), or rehearse without one (emulate: board-emu, the
firmware's core behind a pseudo-terminal)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.backends import firmware_host
from orchestrator.cli.axis_options import with_run_options
from orchestrator.cli.console import err, escape, out, progress_line
from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES

app = typer.Typer(no_args_is_help=True, help="Check a board before a sweep; rehearse without one.")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def emulate(
    ctx: typer.Context,
    pty_link: Annotated[Path, typer.Option(help="symlink to the board's serial port (give it as --serial-port)")
                        ] = Path("board-emu.pty"),
) -> None:
    """Run the emulated board in the foreground until Ctrl-C. Every other option goes to board-emu
    (e.g. --clock-offset-us, --drift-ppm, --path-up-us; `testbed board emulate --help-emu` lists them)."""
    binary = firmware_host.build_target("board-emu")
    extra = list(ctx.args)
    if "--help-emu" in extra:
        extra = ["--help"]
    err.print(f"board-emu: serial port at {pty_link} (testbed sweep --publisher esp32 --serial-port {pty_link}); "
              "Ctrl-C stops it")
    os.execv(str(binary), [str(binary), "--pty-link", str(pty_link), *extra])


CHECK_AXES = ("serial_port", "baud", "board_host", "reset_board", "scenario")  # `testbed run`'s, from the table


def check(
    values: dict[str, Any],
    out_dir: Annotated[Path | None, typer.Option("--out", help="run folder of the check's run (default "
                                                 "results/board-check/<time>-<port>)")] = None,
    ready_timeout: Annotated[float, typer.Option(min=1, help="seconds to wait for the board's BANNER and READY (a "
                                                 "board warming its MQ-2 up takes a minute)")] = 90.0,
) -> None:
    """Is a sweep on this board trustworthy? The port, the banner and its versions, a 20-message run through the
    lab, the cipher suites offered in its capture, the clock bound, heap and RSSI: one line each, what is wrong
    named (docs/board-check.md: what good looks like). Its 20-message run is of --scenario."""
    from orchestrator.lab.board_side import lab_address
    from orchestrator.measure.run import execute_run
    from orchestrator.publishers.board.check import CheckOptions, run_board_check

    if not values["serial_port"]:
        raise TestbedError("board check needs --serial-port", hint="e.g. --serial-port /dev/ttyUSB0, or the PTY of "
                           "`testbed board emulate`")
    lab_address(values["board_host"])  # no interface's address (0.0.0.0, ::): refused before the port opens
    opts = CheckOptions(**{name: values[name] for name in CHECK_AXES}, ready_timeout_s=ready_timeout, run_dir=out_dir)
    result = run_board_check(opts, execute_run, status=progress_line)
    skipped = [s for s in result.steps if s.verdict == "not run"]
    for step in (s for s in result.steps if s.verdict != "not run"):
        out.print(f"{step.verdict:<8} {step.name:<7} {step.seen}", markup=False, highlight=False)
    if skipped:  # one line: the steps a failure left out, and why
        out.print(f"not run  {', '.join(s.name for s in skipped)}: {skipped[0].seen}", markup=False, highlight=False)
    if result.run_dir is not None:
        out.print(f"run folder: {escape(str(result.run_dir))}", highlight=False)
    if result.failed:
        raise TestbedError(f"board check failed: {', '.join(s.name for s in result.failed)}",
                           hint="each FAIL line says what is wrong; docs/board-check.md says what good looks like")
    out.print("board check passed: this board's runs can be trusted for a sweep", highlight=False)


app.command("check")(with_run_options(check, AXES, CHECK_AXES))
