#!/usr/bin/env python3
"""Orchestration overhead of `testbed sweep`, the lab kept up within a block beside a fresh lab per cell.

Runs the same real sweep twice (images already built): as it runs by default (blocked order, the lab kept up
within a block: lab/keptlab.py) and with --fresh-lab-per-cell. Prints, side by side, the seconds of overhead per
cell: the wall time from the sweep's "bundle:" line (its checks done) to the line that ends its last cell, minus
N x interval, per cell (each line is stamped as it arrives; this span holds every cell's setup, publishing,
teardown and analysis, the kept-up labs' own teardowns and what the sweep does between cells). Then its parts, the
per-phase medians each cell recorded in its cell.json (up, publisher_start, publish, stop, teardown, analysis; in a
kept-up block a cell's analysis runs while the next cell's lab gets ready, so the phases overlap and their sum is
more than the span), and what the sweep does before and after its cells (checks, report). Goal: <= 1.5 s per cell
with the lab kept up.

    .venv/bin/python bench/sweep.py [--samples 50] [--interval-ms 20] [--payloads 65,100,200] [--scenarios plain,tls]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
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
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stamped: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: stamped.extend((time.monotonic() - t0, line.rstrip("\n"))
                                                                 for line in proc.stderr or ()))
        reader.start()
        stdout = proc.stdout.read() if proc.stdout else ""
        proc.wait()
        reader.join()
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(stdout[-3000:], "\n".join(line for _, line in stamped[-40:]), file=sys.stderr)
            raise SystemExit(f"sweep {' '.join(extra)} failed (exit {proc.returncode})")
        bundle = next(p for p in Path(out).iterdir() if p.is_dir())
        cells = [json.loads(p.read_text()) for p in sorted(bundle.glob("runs/*/cell.json"))]
        downs = [json.loads(p.read_text()).get("down_s", 0.0) for p in bundle.glob("blocks/*/split.json")]
    ids = {c["cell_id"] for c in cells}
    began = next(t for t, line in stamped if line.startswith("bundle: "))
    ended = max(t for t, line in stamped if line.split(" ", 1)[0] in ("ok", "failed")
                and line.split(" ", 1)[-1].split(":")[0] in ids)
    return {"wall": wall, "cells": cells, "downs": downs, "span": ended - began}


def figures(result: dict[str, Any], nominal: float) -> dict[str, float]:
    """Seconds: per cell, the cells' span beyond the nominal publishing time; its parts (the phases each cell
    recorded, the kept-up labs' teardowns outside every cell); the sweep's fixed cost (checks, report) apart."""
    cells, downs = result["cells"], result["downs"]
    n = len(cells)
    out = {"overhead per cell": (result["span"] - n * nominal) / n,
           "  a cell's phases beyond publishing, median": statistics.median(
               sum(c["timings"].values()) - nominal for c in cells)}
    for phase in sorted({k for c in cells for k in c.get("timings", {})}):
        out[f"    {phase} median"] = statistics.median(c["timings"][phase] for c in cells if phase in c["timings"])
    out["  kept-up lab teardowns, per cell"] = sum(downs) / n
    out["fixed per sweep (checks, report)"] = result["wall"] - result["span"]
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
    print(f"{'seconds':<42}{'kept-up':>10}{'fresh-per-cell':>16}")
    print(f"{'wall time':<42}{results['kept-up']['wall']:>10.2f}{results['fresh-per-cell']['wall']:>16.2f}")
    for key in table["fresh-per-cell"] | table["kept-up"]:
        a, b = table["kept-up"].get(key), table["fresh-per-cell"].get(key)
        print(f"{key:<42}{'-' if a is None else f'{a:.2f}':>10}{'-' if b is None else f'{b:.2f}':>16}")
    kept = table["kept-up"]["overhead per cell"]
    print(f"goal <= {GOAL_S} s per cell kept up: {'met' if kept <= GOAL_S else 'NOT met'} ({kept:.2f} s; "
          f"fresh per cell {table['fresh-per-cell']['overhead per cell']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
