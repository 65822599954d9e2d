"""`testbed demo`: the README's main job as one command. The images (built when missing or out of date, else
reused), the study's sweep (plain vs TLS ChaCha20-Poly1305, 65 and 100 B, the axis table's defaults: the same plan
as a bare `testbed sweep`) and the report's path; `make demo` calls it. The bundle goes under ./results of the current
folder (or --out), never inside the installed package."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.console import err, escape, progress_line


def demo(
    out_root: Annotated[Path, typer.Option("--out", help="folder that receives the bundle")] = Path("results"),
    samples: Annotated[int | None, typer.Option(min=1, help="messages per cell (default: the study's)")] = None,
) -> None:
    """The main job end to end: images if missing, the study's plain vs TLS sweep, and where its report is."""
    from orchestrator.backends.images import build_images
    from orchestrator.cli.sweeprun import sweep_and_report
    from orchestrator.measure import sweep as sw
    from orchestrator.model.sweep import SweepPlan
    from orchestrator.results.manifest import argv_for_display

    built = build_images(progress=progress_line)
    made = [tag for tag, what in built.items() if what == "built"]
    err.print(f"images: {len(built)} ready" + (f", built {', '.join(made)}" if made else ", all reused"))
    plan = SweepPlan.model_validate({} if samples is None else {"samples": samples})
    job = sw.start_sweep(plan, out_root, "demo", argv_for_display())
    err.print(f"bundle: {escape(str(job.bundle))}  ({len(job.cells)} cells, seed {plan.seed})", highlight=False)
    sweep_and_report(job, [])


def register(app: typer.Typer) -> None:
    """Add `demo` to the command line."""
    app.command("demo")(demo)
