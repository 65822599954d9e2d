"""`testbed board`: a board without hardware (board-emu, the firmware's core behind a pseudo-terminal)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.backends import firmware_host
from orchestrator.cli.console import err

app = typer.Typer(no_args_is_help=True, help="Rehearse the board workflow without a board.")


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
