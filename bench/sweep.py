#!/usr/bin/env python3
"""Orchestration overhead of `testbed sweep`, the lab kept up within a block beside a fresh lab per cell.

Runs the same real sweep twice (images already built): as it runs by default (blocked order, the lab kept up
within a block: lab/keptlab.py) and with --fresh-lab-per-cell. Prints, side by side, the seconds of overhead per
cell (wall time minus N x interval, per cell), the overhead inside the cells (their recorded phases minus the
nominal publishing time) and the per-phase medians each cell recorded in its cell.json (up, publisher_start,
publish, stop, teardown, analysis). Goal: <= 1.5 s per cell with the lab kept up.

    .venv/bin/python bench/sweep.py [--samples 50] [--interval-ms 20] [--payloads 65,100,200] [--scenarios plain,tls]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_S = 1.5
MODES = {"kept-up": [], "fresh-per-cell": ["--fresh-lab-per-cell"]}


def run_mode(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    testbed = str(Path(sys.executable).parent / "testbed")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as out:
        argv = [testbed, "sweep", "--payloads", args.payloads, "--scenarios", args.scenarios,
                "--samples", str(args.samples), "--interval", f"{args.interval_ms:g}ms", "--out", out, *extra]
        t0 = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"sweep {' '.join(extra)} failed (exit {proc.returncode})")
        bundle = next(p for p in Path(out).iterdir() if p.is_dir())
        cells = [json.loads(p.read_text()) for p in sorted(bundle.glob("runs/*/cell.json"))]
        downs = [json.loads(p.read_text()).get("down_s", 0.0) for p in bundle.glob("blocks/*/split.json")]
    return {"wall": wall, "cells": cells, "downs": downs}


def figures(result: dict[str, Any], nominal: float) -> dict[str, float]:
    """Seconds: per cell, its phases beyond the nominal publishing time plus its share of its block's lab teardown
    (a kept-up lab's, outside every cell); the sweep's fixed cost (checks, versions, report) apart."""
    cells, downs = result["cells"], result["downs"]
    n = len(cells)
    in_cells = sum(sum(c["timings"].values()) for c in cells)
    out = {"overhead per cell": (in_cells - n * nominal + sum(downs)) / n,
           "  in the cell (median)": statistics.median(sum(c["timings"].values()) - nominal for c in cells)}
    for phase in sorted({k for c in cells for k in c.get("timings", {})}):
        out[f"    {phase} median"] = statistics.median(c["timings"][phase] for c in cells if phase in c["timings"])
    out["  kept-up lab teardowns, per cell"] = sum(downs) / n
    out["fixed per sweep (checks, report)"] = result["wall"] - in_cells - sum(downs)
    out["wall per cell, all in"] = (result["wall"] - n * nominal) / n
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--payloads", default="65,100,200")
    ap.add_argument("--scenarios", default="plain,tls")
    args = ap.parse_args()
    nominal = args.samples * args.interval_ms / 1000.0
    results = {mode: run_mode(args, extra) for mode, extra in MODES.items()}
    table = {mode: figures(r, nominal) for mode, r in results.items()}
    n = len(results["kept-up"]["cells"])
    print(f"sweep: {n} cells ({args.scenarios} x {args.payloads}) x {args.samples} samples x {args.interval_ms:g} ms "
          f"(nominal {nominal:.2f} s/cell), blocked order, each mode once")
    print(f"{'seconds':<34}{'kept-up':>10}{'fresh-per-cell':>16}")
    print(f"{'wall time':<34}{results['kept-up']['wall']:>10.2f}{results['fresh-per-cell']['wall']:>16.2f}")
    for key in table["fresh-per-cell"] | table["kept-up"]:
        a, b = table["kept-up"].get(key), table["fresh-per-cell"].get(key)
        print(f"{key:<34}{'-' if a is None else f'{a:.2f}':>10}{'-' if b is None else f'{b:.2f}':>16}")
    kept = table["kept-up"]["overhead per cell"]
    print(f"goal <= {GOAL_S} s per cell kept up: {'met' if kept <= GOAL_S else 'NOT met'} ({kept:.2f} s; "
          f"fresh per cell {table['fresh-per-cell']['overhead per cell']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
