"""`testbed sweep --plan BUNDLE/manifest.json`: a bundle's plan run again, exactly, into a new bundle.

The same cells in the recorded order (the manifest's ``cell_order``, not the order this version would choose),
the same seed and every option of the recorded plan; only the host's options (the axes marked ``host`` in
orchestrator/model/axes.py: the serial port, the baud rate, the board's address, the reset, the inventory) may
be given anew, as the lab is not where it was. The new bundle's manifest says what it reproduces
(``reproduces``), its report says so in its first table, and `testbed compare OLD NEW` is the
reproducibility check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import TestbedError
from orchestrator.measure import sweep as sw
from orchestrator.model.axes import AXES, AxisTable
from orchestrator.model.layout import BundleLayout
from orchestrator.model.sweep import Cell, SweepPlan
from orchestrator.model.yamlfile import user_input
from orchestrator.results import manifest as bundles


@dataclass(frozen=True)
class Replay:
    """What a rerun runs: the recorded plan (host options overridden), its cells in the recorded order."""

    source: Path  # the bundle whose plan this is
    plan: SweepPlan
    cells: list[Cell]
    reproduces: dict[str, Any]  # what the new manifest records of the source
    name: str  # the source's bundle name suffix, the rerun's unless --name is given


def bundle_folder_of(path: Path) -> Path:
    """The bundle folder of ``path``: a bundle's manifest.json, or the folder itself."""
    if path.is_dir():
        return path
    if path.name == BundleLayout(path.parent).manifest.name:
        return path.parent
    raise TestbedError(f"--plan {path}: not a bundle's manifest.json nor a bundle folder",
                       hint="give RESULTS/<bundle>/manifest.json")


def _ordered(plan: SweepPlan, order: list[str] | None, where: Path) -> list[Cell]:
    """The plan's cells in the recorded order; refused when the two name different cells."""
    cells = {c.cell_id: c for c in plan.cells()}
    if order is None:  # a manifest from before cell_order: the plan's own order
        return list(cells.values())
    missing, extra = sorted(set(order) - cells.keys()), sorted(cells.keys() - set(order))
    if missing or extra or len(order) != len(cells):
        parts = [f"recorded only: {', '.join(missing)}"] if missing else []
        parts += [f"made only now: {', '.join(extra)}"] if extra else []
        said = "; ".join(parts) or "a cell is listed twice"
        raise TestbedError(f"the plan in {where} no longer makes the cells its cell_order names ({said}): this "
                           "version names cells differently, so it cannot rerun it exactly",
                           hint="rerun it with the tool version recorded in the manifest")
    return [cells[i] for i in order]


def replay_plan(path: Path, host: dict[str, Any], table: AxisTable = AXES,
                plan_model: Callable[..., SweepPlan] = SweepPlan) -> Replay:
    """The plan recorded at ``path`` with the host options ``host`` (axis name -> value) given anew."""
    host_axes = [a.name for a in table if a.host]
    unknown = sorted(set(host) - set(host_axes))
    if unknown:
        raise TestbedError(f"--plan reruns the recorded plan exactly; {', '.join(unknown)} cannot be changed",
                           hint="only the host's options may be given: "
                                + ", ".join(table[n].flag for n in host_axes))
    bundle = bundle_folder_of(path)
    manifest = bundles.load_manifest(bundle)
    recorded = manifest.get("plan")
    if not isinstance(recorded, dict):
        raise TestbedError(f"{BundleLayout(bundle).manifest}: no plan recorded")
    with user_input(f"plan in {BundleLayout(bundle).manifest} with this host's options"):
        plan = plan_model(**{**recorded, **host})
    order = manifest.get("cell_order")
    cells = _ordered(plan, order if isinstance(order, list) else None, BundleLayout(bundle).manifest)
    changed = {k: {"recorded": recorded.get(k), "now": v} for k, v in host.items() if recorded.get(k) != v}
    reproduces = {"bundle": str(bundle.resolve()), "name": bundle.name, "created_utc": manifest.get("created_utc"),
                  "tool_version": manifest.get("tool_version"), "git_commit": manifest.get("git_commit"),
                  "host_options": changed}
    return Replay(bundle, plan, cells, reproduces, str(manifest.get("name") or "sweep"))


def start_replay(replay: Replay, out_root: Path, name: str, command: list[str]) -> sw.SweepJob:
    """The new bundle (validated and made as every sweep's is), recording the source and the order it runs."""
    job = sw.start_sweep(replay.plan, out_root, name, command)
    manifest = bundles.load_manifest(job.bundle)
    manifest["cell_order"] = [c.cell_id for c in replay.cells]
    manifest["reproduces"] = replay.reproduces
    bundles.save_manifest(job.bundle, manifest)
    return dataclasses.replace(job, cells=replay.cells)  # whatever else a sweep's job carries, kept
