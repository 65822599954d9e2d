"""The results format's versions, in one place: manifest.json, metrics.json and cell.json carry ``schema_version``.

Data of a newer version is refused (this testbed cannot know what changed); data of an older
version is brought up to the current one by the registered migrations, one version at a time,
in memory (the file on disk is rewritten only when the writer saves it again, e.g. on --resume).

To change a format: raise its version in model/layout.py SCHEMA_VERSIONS and register the step from the old
version in MIGRATIONS[kind][old] (a function taking the data at ``old`` and returning it at
``old + 1``; the step's ``schema_version`` is set here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from orchestrator.errors import TestbedError
from orchestrator.model.layout import SCHEMA_VERSIONS
from orchestrator.results.atomic import read_json_strict

Kind = Literal["manifest", "metrics", "cell"]
Migration = Callable[[dict[str, Any]], dict[str, Any]]

SCHEMA_VERSION = SCHEMA_VERSIONS  # defined in model/layout.py with the other names of the format
MIGRATIONS: dict[Kind, dict[int, Migration]] = {"manifest": {}, "metrics": {}, "cell": {0: dict, 1: dict}}
# Formats that were written without ``schema_version`` at first: such data is this version (cell.json before
# orchestrator/model/cell.py: version 0, the same keys as version 1). cell.json version 2 added ``order`` and ``lab``
# (a sweep's order and block, what of the lab was reused): version 1 is version 2 without them.
UNVERSIONED_IS: dict[Kind, int] = {"cell": 0}


def check_schema(data: Any, path: Path, kind: Kind) -> dict[str, Any]:
    """``data`` read from ``path`` at the current version of ``kind``; TestbedError when it cannot be."""
    if not isinstance(data, dict):
        raise TestbedError(f"{path}: expected a JSON object")
    version = data.get("schema_version", UNVERSIONED_IS.get(kind))
    if not isinstance(version, int) or isinstance(version, bool):
        raise TestbedError(f"{path}: schema_version: missing or not an integer")
    current = SCHEMA_VERSION[kind]
    if version > current:
        raise TestbedError(f"{path}: schema_version {version} is newer than this testbed understands ({current})",
                           hint="upgrade mqtt-tls-testbed to read it")
    while version < current:
        step = MIGRATIONS[kind].get(version)
        if step is None:
            raise TestbedError(f"{path}: schema_version {version} is older than this testbed reads ({current}) "
                               f"and no migration from {version} is known")
        data = {**step(data), "schema_version": version + 1}
        version += 1
    return data


def read_versioned(path: Path, kind: Kind) -> dict[str, Any]:
    """Read a JSON file of ``kind`` and bring it to the current version."""
    return check_schema(read_json_strict(path), path, kind)
