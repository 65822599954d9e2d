"""`testbed sweep --plan BUNDLE/manifest.json`: which options the command line gave, and the rerun's first lines.

Only options given on the command line count (click's parameter source), so a default is never taken for an
override; every one of them must be a host option (orchestrator/measure/replay.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from orchestrator.cli.axis_options import command_axes, to_model
from orchestrator.cli.console import err, escape
from orchestrator.errors import TestbedError
from orchestrator.measure.replay import Replay, replay_plan, start_replay
from orchestrator.measure.sweep import SweepJob
from orchestrator.model.axes import AxisTable
from orchestrator.model.sweep import SweepPlan


def given_on_command_line(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def host_overrides(ctx: typer.Context, table: AxisTable, given: dict[str, Any]) -> dict[str, Any]:
    """The host options given on the command line (axis name -> the model's value); any other axis option
    given is refused by its flag."""
    values = to_model(table, "sweep", given)
    host: dict[str, Any] = {}
    refused: list[str] = []
    for axis in command_axes(table, "sweep"):
        param = axis.sweep.name if axis.sweep else (axis.option or axis.name)
        if not given_on_command_line(ctx, param):
            continue
        if axis.host:
            host[axis.name] = values[axis.name]
        else:
            refused.append("--" + param.replace("_", "-"))
    if refused:
        raise TestbedError(f"--plan reruns the recorded plan exactly: {', '.join(refused)} cannot be given with it",
                           hint="only the host's options may be: "
                                + ", ".join(a.flag for a in table if a.host and a.option is not None))
    return host


def start_rerun(ctx: typer.Context, table: AxisTable, plan_model: Callable[..., SweepPlan], given: dict[str, Any],
          plan_file: Path, out_root: Path, name: str, command: list[str]) -> SweepJob:
    """The new bundle of the rerun, after saying what it reruns."""
    if given_on_command_line(ctx, "resume"):
        raise TestbedError("--plan and --resume cannot go together: --plan starts a new bundle, --resume completes "
                           "one")
    replay = replay_plan(plan_file, host_overrides(ctx, table, given), table, plan_model)
    err.print(escape(describe_replay(replay)), highlight=False)
    job = start_replay(replay, out_root, name if given_on_command_line(ctx, "name") else replay.name, command)
    err.print(f"bundle: {escape(str(job.bundle))}  ({len(job.cells)} cells, seed {job.plan.seed})", highlight=False)
    return job


def describe_replay(replay: Replay) -> str:
    """'reproducing B (tool 0.x, commit c): 4 cells in its recorded order, seed 1; --serial-port x -> y'."""
    r = replay.reproduces
    text = (f"reproducing {r['name']} (tool {r['tool_version']}, commit {str(r['git_commit'])[:12]}): "
            f"{len(replay.cells)} cells in its recorded order, seed {replay.plan.seed}")
    changes = [f"{k.replace('_', '-')} {v['recorded']} -> {v['now']}" for k, v in r["host_options"].items()]
    return text + ("; this host's " + ", ".join(changes) if changes else "")
