#!/usr/bin/env python3
"""How long a sweep's plan takes to be checked cell by cell (orchestrator/model/plancheck.py), before anything starts.

Builds a big plan (every built-in scenario x 10 payloads x every built-in profile x both device stacks, 3 repeats;
the TLS 1.3 scenarios on mbedTLS 2.28 are its impossible cells) and times, best of 5: the plan's model (its lists'
rules), the per-cell check of every distinct cell (scenario and profile rules), and the refusal with its hint.
Pure Python: no Docker. Goal: under 1 s for the whole check of a plan of a few thousand cells.

    .venv/bin/python bench/plan_check.py [--repeat 3] [--payloads 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.errors import TestbedError  # noqa: E402
from orchestrator.model import impairment, plancheck, scenario  # noqa: E402
from orchestrator.model.sweep import SweepPlan  # noqa: E402

GOAL_S = 1.0


def best_of(n: int, work: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(n):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--payloads", type=int, default=10)
    args = parser.parse_args()
    given: dict[str, Any] = {
        "scenarios": scenario.builtin_names(), "payloads": [100 + 10 * i for i in range(args.payloads)],
        "impairments": impairment.builtin_names(), "device_stacks": ["mbedtls-3.6", "mbedtls-2.28"],
        "repeat": args.repeat, "samples": 50, "baseline": "plain"}
    model_s, plan = best_of(5, lambda: SweepPlan(**given))
    every = plancheck.canonical_cells(plan)
    check_s, found = best_of(5, lambda: plancheck.impossible_cells(plan))
    cells = len(every)
    distinct = len({tuple(getattr(c, a.name) for a in plan.axes.sweep_axes()) for c in every})
    refusal_s, error = best_of(5, lambda: plancheck.refusal(plan, every, found) if found else None)
    total = model_s + check_s + refusal_s
    impossible = len({i.cell.cell_id for i in found})
    print(f"plan: {cells} cells ({distinct} distinct, repeats aside), {impossible} impossible")
    print(f"{'the plan model (its lists x the axes rules)':<52}{model_s:>8.3f} s")
    print(f"{'every distinct cell x scenario and profile rules':<52}{check_s:>8.3f} s")
    print(f"{'the refusal and its hint':<52}{refusal_s:>8.3f} s")
    print(f"goal < {GOAL_S} s: {'met' if total < GOAL_S else 'NOT met'} ({total:.3f} s)")
    if isinstance(error, TestbedError):
        print(f"hint: {error.hint}")
    return 0 if total < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
