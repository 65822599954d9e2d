#!/usr/bin/env python3
"""Orchestration overhead of `testbed sweep`: wall time minus N x interval per cell.

Runs a real sweep (images already built) and prints seconds of overhead per cell, with the
per-phase medians each cell recorded in its cell.json (up, publish, stop, teardown, analysis).
Goal: <= 10 s per cell.

    .venv/bin/python bench/sweep.py [--samples 50] [--interval-ms 20] [--payloads 65,100]
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

GOAL_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--payloads", default="65,100")
    ap.add_argument("--scenarios", default="plain,tls")
    args = ap.parse_args()
    testbed = str(Path(sys.executable).parent / "testbed")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as out:
        argv = [testbed, "sweep", "--payloads", args.payloads, "--scenarios", args.scenarios,
                "--samples", str(args.samples), "--interval", f"{args.interval_ms:g}ms", "--out", out]
        t0 = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            print(f"sweep failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        bundle = next(p for p in Path(out).iterdir() if p.is_dir())
        cells = [json.loads(p.read_text()) for p in sorted(bundle.glob("runs/*/cell.json"))]
    n = len(cells)
    nominal = args.samples * args.interval_ms / 1000.0
    overhead = (wall - n * nominal) / n
    print(f"sweep: {n} cells x {args.samples} samples x {args.interval_ms:g} ms (nominal {nominal:.2f} s/cell)")
    print(f"wall time: {wall:.2f} s  (includes validation, tool versions, report build)")
    print(f"orchestration overhead: {overhead:.2f} s per cell  (goal <= {GOAL_S:.0f} s: "
          f"{'met' if overhead <= GOAL_S else 'NOT met'})")
    phases = sorted({k for c in cells for k in c.get("timings", {})})
    for ph in phases:
        values = [c["timings"][ph] for c in cells if ph in c.get("timings", {})]
        print(f"  {ph:<12} median {statistics.median(values):6.2f} s   max {max(values):6.2f} s")
    in_cells = sum(sum(c.get("timings", {}).values()) for c in cells)
    print(f"  outside cells (plan, versions, report): {wall - in_cells:.2f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
