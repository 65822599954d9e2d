"""`testbed compare A B`: two results bundles side by side (orchestrator/report/compare.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.console import escape, out


def compare(
    bundle_a: Annotated[Path, typer.Argument(help="results bundle A (the reference)")],
    bundle_b: Annotated[Path, typer.Argument(help="results bundle B, compared with A (deltas are B - A)")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="folder for comparisons.csv, report.md and "
                                                  "report.html (default results/compare-<A>-vs-<B>)")] = None,
    mapping: Annotated[Path | None, typer.Option(help="YAML/JSON file pairing A's cell ids or configurations with "
                                                  "B's (default: cells matched by configuration)")] = None,
) -> None:
    """Compare two bundles: cells matched by configuration, deltas with 95 % CIs and tests, cells in one only."""
    from orchestrator.report.compare import compare_bundles

    target = out_dir or Path("results") / f"compare-{bundle_a.resolve().name}-vs-{bundle_b.resolve().name}"
    written = compare_bundles(bundle_a, bundle_b, target, mapping=mapping)
    out.print(f"compared {escape(str(bundle_b))} with {escape(str(bundle_a))}: {len(written)} files in "
              f"{escape(str(target))}; report: {escape(str(written[-1]))}")


def register(app: typer.Typer) -> None:
    """Add `compare` to the command line."""
    app.command("compare")(compare)
