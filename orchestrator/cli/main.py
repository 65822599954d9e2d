"""`testbed`: the command line. Commands parse, call a plain function, print; nothing else."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator import __version__
from orchestrator.cli.axis_options import to_model, with_axis_options, with_run_options
from orchestrator.cli.console import err, escape, out, progress_line
from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES, AxisTable
from orchestrator.model.layout import BundleLayout
from orchestrator.model.run import RunSpec
from orchestrator.model.sweep import SweepPlan
from orchestrator.model.yamlfile import user_input
from orchestrator.redact import redact
from orchestrator.signals import install_stop_signals

app = typer.Typer(name="testbed", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Measure what TLS (ChaCha20-Poly1305 first) costs an MQTT sensor link.")
images_app = typer.Typer(no_args_is_help=True, help="Build, or remove, the testbed's Docker images.")
app.add_typer(images_app, name="images")

_state = {"debug": False}


def _version(value: bool) -> None:
    """The version (orchestrator/__init__.py, its one place), and in a checkout the git commit it runs."""
    if value:
        from orchestrator.environment.record import git_commit

        git = git_commit()
        commit = f" (git {git['git_commit'][:12]}{', modified' if git['git_dirty'] else ''})" \
            if git["git_commit"] else ""
        out.print(f"testbed {__version__}{commit}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version")] = False) -> None:
    _state["debug"] = debug


@app.command()
def doctor(
    out_dir: Annotated[Path | None, typer.Option("--out", help="folder run folders are written to, which the "
                                                  "smoke capture must be able to write (default results/runs)")
                       ] = None,
) -> None:
    """What works here for you and what is missing, each with the fix: proven with a smoke capture and a
    helper container."""
    from orchestrator.cli.render import doctor_table
    from orchestrator.doctor.checks import checks, failed_required

    results = checks(out_dir)
    out.print(doctor_table(results))
    failed = failed_required(results)
    if failed:
        raise TestbedError(f"{len(failed)} required check(s) failed: {', '.join(c.name for c in failed)}; "
                           "see the fix column")


@images_app.command("build")
def images_build(
    names: Annotated[list[str] | None, typer.Argument(help="broker, capture, subscriber, publisher")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="build even when an up-to-date image exists")] = False,
    mirror: Annotated[str | None, typer.Option(help="Debian mirror for the offline base image")] = None,
) -> None:
    """Build (or reuse) the images; without a registry, a Debian base is made with debootstrap."""
    from orchestrator.backends.images import build_images

    result = build_images(names or None, rebuild=rebuild, mirror=mirror,
                          progress=progress_line)
    for tag, what in result.items():
        out.print(f"{tag}: {what}")


@images_app.command("prune")
def images_prune() -> None:
    """Remove every image this tool built (and its offline base images); images it pulled stay."""
    from orchestrator.backends.images import prune_images

    removed, kept = prune_images()
    out.print(f"removed {len(removed)} image(s)" + (": " + ", ".join(removed) if removed else ""), highlight=False)
    if kept:
        raise TestbedError("some images are still in use and were kept", evidence=kept,
                           hint="`testbed down` (and wait for running sweeps), then `testbed images prune` again")


def up(
    values: dict[str, Any],
    expose: Annotated[bool, typer.Option("--expose", help="publish the broker on EVERY interface of this host, on "
                                         "purpose (a real ESP32 on the LAN; passwords and an ACL then apply); a "
                                         "board's run publishes on one address, --board-host")] = False,
    host_port: Annotated[int | None, typer.Option(min=1, max=65535,
                                                  help="host port for the broker (default: scenario's)")] = None,
) -> None:
    """Start broker + capture sidecar + subscriber for SCENARIO and leave them running (the impairment, on the
    broker->subscriber path, stays applied)."""
    from orchestrator.lab import session

    info = session.up(values["scenario"], expose=expose, host_port=host_port, impairment_name=values["impairment"],
                      progress=progress_line)
    for line in info:
        out.print(line)


app.command("up")(with_run_options(up, AXES, ("scenario", "impairment")))


@app.command()
def status() -> None:
    """The testbed's containers and their state."""
    from orchestrator.cli.render import status_table
    from orchestrator.lab import session

    rows = session.status()
    out.print(status_table(rows) if rows else "nothing running")


@app.command()
def down() -> None:
    """Remove every container, network and volume of the testbed; safe to run twice."""
    from orchestrator.lab import session

    for line in session.down():
        out.print(line)


def _run(models: Models, given: dict[str, Any],
         out_dir: Annotated[Path | None, typer.Option("--out", help="run folder (default results/runs/<time>-...)")
                            ] = None) -> None:
    """One measurement: up, capture, subscriber, publisher, count, stop, tear down, analyse, summary."""
    from orchestrator.cli import render
    from orchestrator.measure import run as measure_run

    with user_input("run parameters"):
        spec = models.run(**to_model(models.table, "run", given))
    try:
        with render.run_bar(spec.samples) as (progress, status):
            outcome = measure_run.execute_run(spec, out_dir,  # None: a new folder of its own under results/runs
                                              progress=progress, status=status)
    except KeyboardInterrupt:
        raise TestbedError("run interrupted: containers (or lab hosts) and impairment cleaned up; raw files kept",
                           exit_code=130) from None
    render.run_outcome(spec, outcome)
    if outcome.status != "ok":
        raise TestbedError(f"run failed: {outcome.error}", hint=f"logs kept in {outcome.run_dir}")


def _sweep(
    models: Models, given: dict[str, Any], ctx: typer.Context,
    out_root: Annotated[Path, typer.Option("--out", help="folder that receives the bundle")] = Path("results"),
    resume: Annotated[Path | None, typer.Option(help="resume this bundle: run exactly its missing cells")] = None,
    name: Annotated[str, typer.Option(help="bundle name suffix (with --plan: the recorded one)")] = "sweep",
    grading: Annotated[list[Path] | None, typer.Option(help="extra grading table (YAML); repeatable")] = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="rerun the plan of this BUNDLE/manifest.json "
                                                   "exactly (cells, order, seed, options) into a new bundle; only "
                                                   "the host's options may be given anew")] = None,
) -> None:
    """The study's matrix (scenarios x payloads x impairments x repeats) into a results bundle + report."""
    from orchestrator.measure import sweep as sw
    from orchestrator.results.manifest import argv_for_display

    sw.check_grading(grading or [])
    if plan_file is not None:
        from orchestrator.cli import replay

        job = replay.start_rerun(ctx, models.table, models.plan, given, plan_file, out_root, name,
                           argv_for_display())
    elif resume is not None:
        job = sw.resume_sweep(resume)
        err.print(f"resuming {job.bundle}: {len(job.cells)} cell(s) to run")
    else:
        with user_input("sweep plan"):
            plan = models.plan(**to_model(models.table, "sweep", given))
        job = sw.start_sweep(plan, out_root, name, argv_for_display())
        err.print(f"bundle: {job.bundle}  ({len(job.cells)} cells, seed {plan.seed})")
    from orchestrator.cli.sweeprun import sweep_and_report

    sweep_and_report(job, grading or [])


@dataclass(frozen=True)
class Models:
    """What `run` and `sweep` build from the command line: the axis table's RunSpec and SweepPlan."""

    table: AxisTable
    run: Callable[..., RunSpec]
    plan: Callable[..., SweepPlan]


def add_run_commands(target: typer.Typer, models: Models) -> None:
    """`run` and `sweep` on ``target``, with an option for every axis of ``models.table``."""
    target.command("run")(with_axis_options(functools.partial(_run, models), models.table, "run"))
    target.command("sweep")(with_axis_options(functools.partial(_sweep, models), models.table, "sweep"))


add_run_commands(app, Models(AXES, RunSpec, SweepPlan))


@app.command()
def report(
    bundle: Annotated[Path, typer.Argument(help="results bundle folder")],
    baseline: Annotated[str | None, typer.Option(help="scenario the others are compared with")] = None,
    grading: Annotated[list[Path] | None, typer.Option(help="extra grading table (YAML); repeatable")] = None,
) -> None:
    """Rebuild every derived file (summary, comparisons, plots, report.md/html) from the raw run data."""
    from orchestrator.cli import rebuild

    paths = rebuild.rebuild_bundle(bundle, baseline=baseline, grading=grading or [],
                                   progress=progress_line)
    out.print(f"rebuilt {len(paths)} files in {escape(str(bundle))}; report: "
              f"{escape(str(BundleLayout(bundle).report_html))}")


@app.command("archive")
def archive_cmd(
    bundle: Annotated[Path, typer.Argument(help="results bundle folder")],
    include_secrets: Annotated[bool, typer.Option("--include-secrets",
                                                  help="also pack private keys and TLS key logs")] = False,
) -> None:
    """Pack a bundle into BUNDLE.tar.gz with SHA256SUMS inside (secrets left out unless asked)."""
    from orchestrator.results.archive import archive
    from orchestrator.results.manifest import load_manifest

    dest, excluded = archive(bundle, include_secrets=include_secrets)
    out.print(f"archive: {escape(str(dest))}")
    if excluded:  # each by name: what a reader of the archive will not find
        out.print(f"left out {len(excluded)} secret file(s) (keys, passwords, key logs, serial logs; "
                  "--include-secrets packs them):", highlight=False)
        for rel in excluded:
            out.print(f"  {rel}", highlight=False, markup=False)
    for rel, n in load_manifest(bundle)["archive"]["scrubbed"].items():  # a plain cell's password in its capture
        out.print(f"overwrote {n} secret value(s) with '*' (sizes kept) in the archive's copy of {rel}",
                  highlight=False, markup=False)


@app.command("verify")
def verify_cmd(archive_path: Annotated[Path, typer.Argument(help="a .tar.gz made by testbed archive")]) -> None:
    """Check every checksum inside an archive."""
    from orchestrator.results.archive import verify

    checked, problems = verify(archive_path)
    if problems:
        raise TestbedError(f"{archive_path}: {len(problems)} problem(s)", evidence="\n".join(problems))
    out.print(f"{escape(str(archive_path))}: {checked} files, all checksums match")


def _register_subapps() -> None:
    """Sub-apps that live in their own modules."""
    from orchestrator.cli import board, compare, demo, energy, firmware, impair

    app.add_typer(board.app, name="board")
    app.add_typer(energy.app, name="energy")
    app.add_typer(firmware.app, name="firmware")
    app.add_typer(impair.app, name="impair")
    compare.register(app)
    demo.register(app)


_register_subapps()


def main(argv: list[str] | None = None) -> int:
    """Entry point: the one place an error becomes an exit code. SIGTERM and SIGHUP tear down as Ctrl-C does. No
    error path prints a secret: a TestbedError is redacted when made; an internal error's text and a --debug
    traceback are redacted here."""
    install_stop_signals()
    try:
        app(args=argv, prog_name="testbed", standalone_mode=True)
    except SystemExit as exc:  # typer's own exits: --help, usage errors (2), and 130 for an interrupt
        code = exc.code
        if code == 130:  # a command that let KeyboardInterrupt through (Ctrl-C, SIGTERM, SIGHUP)
            err.print("[yellow]interrupted[/]: cleaned up; finished results are kept")
        return code if isinstance(code, int) else (0 if code is None else 1)
    except TestbedError as exc:
        if _state["debug"]:
            _print_traceback(exc)
        err.print(f"[red]error:[/] {escape(exc.message)}", highlight=False, markup=True)
        if exc.evidence:
            err.print(exc.evidence, highlight=False, markup=False)
        if exc.hint:
            err.print(f"[yellow]hint:[/] {escape(exc.hint)}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: cleaned up; finished results are kept")
        return 130
    except Exception as exc:
        if _state["debug"]:
            _print_traceback(exc)
        err.print(f"[red]internal error:[/] {type(exc).__name__}: {escape(redact(str(exc)))}"
                  + ("" if _state["debug"] else " (run with --debug for the traceback)"), highlight=False)
        return 70
    return 0


def _print_traceback(exc: BaseException) -> None:
    """``--debug``: the traceback on stderr, redacted as every message is (orchestrator/redact.py): an exception's
    text, or one it was raised from, can hold a password or a key-log line."""
    sys.stderr.write(redact("".join(traceback.format_exception(exc))))
    sys.stderr.flush()


def entry() -> None:  # pragma: no cover - console script wrapper
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
