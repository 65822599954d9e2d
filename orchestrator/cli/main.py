"""`testbed`: the command line. Commands parse, call a plain function, print; nothing else."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator import __version__
from orchestrator.cli.console import err, out
from orchestrator.errors import TestbedError

app = typer.Typer(name="testbed", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Measure what TLS (ChaCha20-Poly1305 first) costs an MQTT sensor link.")
images_app = typer.Typer(no_args_is_help=True, help="Build the testbed's Docker images.")
app.add_typer(images_app, name="images")

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        out.print(f"testbed {__version__}")
        raise typer.Exit()


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version")] = False) -> None:
    _state["debug"] = debug


@app.command()
def doctor() -> None:
    """Table of what works here and what is missing, each with the fix."""
    from orchestrator.doctor import checks

    table = Table(title="testbed doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col)
    failed = 0
    for c in checks():
        status = "[green]ok[/]" if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]optional[/]")
        failed += (not c.ok) and c.required
        table.add_row(c.name, status, c.detail, c.fix)
    out.print(table)
    if failed:
        raise TestbedError(f"{failed} required check(s) failed; see the fix column")


@images_app.command("build")
def images_build(
    names: Annotated[list[str] | None, typer.Argument(help="broker, capture, subscriber, publisher")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="build even when an up-to-date image exists")] = False,
    mirror: Annotated[str | None, typer.Option(help="Debian mirror for the offline base image")] = None,
) -> None:
    """Build (or reuse) the images; without a registry, a Debian base is made with debootstrap."""
    from orchestrator.backends.images import build_images

    result = build_images(names or None, rebuild=rebuild, mirror=mirror,
                          progress=lambda m: err.print(f"[dim]{m}[/]"))
    for tag, what in result.items():
        out.print(f"{tag}: {what}")


@app.command()
def up(
    scenario: Annotated[str, typer.Option(help="built-in scenario name or a YAML file")] = "tls",
    expose: Annotated[bool, typer.Option("--expose", help="publish the broker on all interfaces (real ESP32)")
                      ] = False,
    host_port: Annotated[int | None, typer.Option(help="host port for the broker (default: scenario's)")] = None,
) -> None:
    """Start broker + capture sidecar + subscriber for SCENARIO and leave them running."""
    from orchestrator import session

    info = session.up(scenario, expose=expose, host_port=host_port,
                      progress=lambda m: err.print(f"[dim]{m}[/]"))
    for line in info:
        out.print(line)


@app.command()
def status() -> None:
    """The testbed's containers and their state."""
    from orchestrator import session

    rows = session.status()
    if not rows:
        out.print("nothing running")
        return
    table = Table()
    for col in ("service", "container", "state", "health", "ports"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    out.print(table)


@app.command()
def down() -> None:
    """Remove every container, network and volume of the testbed; safe to run twice."""
    from orchestrator import session

    for line in session.down():
        out.print(line)


def _register_optional() -> None:
    """Sub-apps that live in their own modules (added as their issues land)."""
    try:
        from orchestrator.cli import firmware
    except ImportError:
        return
    app.add_typer(firmware.app, name="firmware")


_register_optional()


def main(argv: list[str] | None = None) -> int:
    """Entry point: the one place an error becomes an exit code."""
    try:
        app(args=argv, prog_name="testbed", standalone_mode=True)
    except SystemExit as exc:  # typer's own exits: --help, usage errors (2)
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except TestbedError as exc:
        if _state["debug"]:
            traceback.print_exc()
        err.print(f"[red]error:[/] {exc.message}", highlight=False, markup=True)
        if exc.evidence:
            err.print(exc.evidence, highlight=False, markup=False)
        if exc.hint:
            err.print(f"[yellow]hint:[/] {exc.hint}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: cleaned up; finished results are kept")
        return 130
    except Exception as exc:
        if _state["debug"]:
            raise
        err.print(f"[red]internal error:[/] {type(exc).__name__}: {exc} (run with --debug for the traceback)",
                  highlight=False)
        return 70
    return 0


def entry() -> None:  # pragma: no cover - console script wrapper
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
