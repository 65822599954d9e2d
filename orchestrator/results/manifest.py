"""The results bundle: results/<UTC time>-<name>/ with manifest.json, runs/<cell>/, derived files.

Versioned (schema_version, checked and migrated in results/schema.py: a newer bundle is refused,
an older one is migrated), self-describing (tool version, git commit, command line, plan, seed,
host, tool versions, impairment state per cell: measured by environment/record.py, recorded here; the images every
cell's containers ran, gathered here from the cells' own records) and written as it goes, atomically,
so an interrupted sweep loses nothing finished and resumes with exactly its missing cells.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.errors import TestbedError
from orchestrator.model.layout import BundleLayout, secrets_in_bundle
from orchestrator.model.sweep import Cell, SweepPlan
from orchestrator.model.yamlfile import user_input
from orchestrator.results.atomic import read_json, write_json_atomic
from orchestrator.results.schema import IMAGES_FROM_CELLS, SCHEMA_VERSION, read_versioned

MIN_FREE_BYTES = 200 * 1024 * 1024


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def new_bundle_dir(out_root: Path, name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "sweep"
    return out_root / f"{utc_stamp()}-{safe}"


def make_bundle_dir(out_root: Path, name: str) -> Path:
    """The new bundle's folder, made: refused by name when a bundle of that name exists (another sweep with this
    --name started in the same second)."""
    bundle = new_bundle_dir(out_root, name)
    try:
        bundle.mkdir(parents=True)
    except FileExistsError:
        raise TestbedError(f"the bundle {bundle} exists already: another sweep named {name!r} started in the same "
                           "second", hint="give this sweep another --name") from None
    except OSError as exc:
        raise TestbedError(f"cannot make the bundle {bundle}: {exc.strerror or exc}",
                           hint="choose another folder with --out") from None
    return bundle


def check_writable(out_root: Path, min_free: int = MIN_FREE_BYTES) -> None:
    """A clear error before the first cell when --out cannot be written or the disk is (nearly) full."""
    try:
        out_root.mkdir(parents=True, exist_ok=True)
        probe = out_root / f".testbed-write-probe-{os.getpid()}"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as exc:
        raise TestbedError(f"cannot write results to {out_root}: {exc.strerror or exc}",
                           hint="choose another folder with --out") from None
    free = shutil.disk_usage(out_root).free
    if free < min_free:
        raise TestbedError(f"only {free / 1e6:.0f} MB free on the disk of {out_root}; a sweep needs at least "
                           f"{min_free / 1e6:.0f} MB", hint="free some space or choose another --out")


def load_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest at the current schema version (older ones migrated, newer refused)."""
    path = BundleLayout(bundle).manifest
    if not path.is_file():
        raise TestbedError(f"{path}: missing; {bundle} is not a results bundle")
    return read_versioned(path, "manifest")


def save_manifest(bundle: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest, its bundle-wide images gathered from its cells' (with_images)."""
    write_json_atomic(BundleLayout(bundle).manifest, with_images(manifest))


def image_name(tag: str) -> str:
    """An image as the manifest names it: ``publisher-mbedtls36`` for testbed-publisher-mbedtls36:latest, another
    tag (or an id) as it is."""
    found = re.fullmatch(r"testbed-(.+):latest", tag)
    return found.group(1) if found else tag


def images_ran(cells: Any) -> dict[str, dict[str, Any]]:
    """``image_digests`` (image name -> id) and ``versions`` (image name -> packages read inside it) of every image
    the cells' containers ran (cell entries' ``images``, as cell.json records them): a union, never one cell's for
    all. An image name that ran as two ids (rebuilt between a sweep and its --resume) lists both ids, and its
    versions per id (``name@<12 hex of the id>``)."""
    seen: dict[str, dict[str, Any]] = {}  # name -> id -> versions
    for entry in (cells or {}).values() if isinstance(cells, dict) else ():
        for ran in ((entry or {}).get("images") or {}).values():
            if isinstance(ran, dict) and ran.get("id"):
                seen.setdefault(image_name(str(ran.get("image") or ran["id"])), {})[ran["id"]] = ran.get("versions")
    digests: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    for name, ids in sorted(seen.items()):
        digests[name] = next(iter(ids)) if len(ids) == 1 else sorted(ids)
        for image, found in sorted(ids.items()):
            versions[name if len(ids) == 1 else f"{name}@{image.removeprefix('sha256:')[:12]}"] = found
    return {"image_digests": digests, "versions": versions}


def with_images(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its environment's images gathered from its cells, when it takes them from its cells (a
    bundle from before manifest version 2 keeps those it read from the tags, labelled so, schema.manifest_1_to_2);
    a manifest none of whose cells ran a container (yet, or at a lab's hosts) is left as it is."""
    env = manifest.get("environment")
    if not isinstance(env, dict) or env.get("images_from", IMAGES_FROM_CELLS) != IMAGES_FROM_CELLS:
        return manifest
    ran = images_ran(manifest.get("cells"))
    if not ran["image_digests"]:
        return manifest
    return {**manifest, "environment": {**env, **ran, "images_from": IMAGES_FROM_CELLS}}


def new_manifest(plan: SweepPlan, name: str, command: list[str], *, source: dict[str, Any],
                 environment: dict[str, Any]) -> dict[str, Any]:
    """A new bundle's manifest; ``source`` is {git_commit, git_dirty}, ``environment`` the host and tool versions."""
    return {
        "schema_version": SCHEMA_VERSION["manifest"],
        "name": name,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "tool_version": __version__,
        **source,
        "command": command,
        "plan": plan.model_dump(),
        "seed": plan.seed,
        "cell_order": [c.cell_id for c in plan.cells()],
        "environment": environment,
        "cells": {},
        "secrets_in_bundle": secrets_in_bundle(),  # declared in orchestrator/model/layout.py (SECRET_FILES)
    }


def plan_of(manifest: dict[str, Any], bundle: Path) -> SweepPlan:
    """The sweep plan recorded in ``bundle``'s manifest."""
    with user_input(f"plan in {BundleLayout(bundle).manifest}"):
        return SweepPlan.model_validate(plan_listed(manifest.get("plan")))


def plan_listed(plan: Any) -> Any:
    """A recorded plan with every axis `sweep` lists now as a list: a bundle from before an axis became listable
    recorded its one value (``"qos": 0``), under the axis's own name when the list's differs; its cells are the same."""
    if not isinstance(plan, dict):
        return plan  # the model names what is wrong
    plan = dict(plan)
    for axis in SweepPlan.axes.sweep_axes():
        if axis.sweep is None:
            continue
        listed = axis.sweep.name
        if listed not in plan and axis.name in plan:
            plan[listed] = plan.pop(axis.name)
        if listed in plan and not isinstance(plan[listed], list):
            plan[listed] = [plan[listed]]
    return plan


def cell_status(bundle: Path, cell: Cell) -> str | None:
    """The status in the cell's cell.json (ok, failed, interrupted, running); None when it has none."""
    return read_json(BundleLayout(bundle).run(cell.cell_id).cell).get("status")


def missing_cells(bundle: Path, plan: SweepPlan) -> list[Cell]:
    """Cells not finished ok (never started, interrupted or failed): what --resume runs."""
    return [c for c in plan.cells() if cell_status(bundle, c) != "ok"]


def failed_cells(bundle: Path, plan: SweepPlan) -> list[Cell]:
    """Cells that were attempted (have a cell.json) and did not finish ok."""
    return [c for c in plan.cells() if BundleLayout(bundle).run(c.cell_id).cell.exists()
            and cell_status(bundle, c) != "ok"]


def argv_for_display() -> list[str]:
    return ["testbed", *sys.argv[1:]] if sys.argv else ["testbed"]
