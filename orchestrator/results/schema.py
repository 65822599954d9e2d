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
# where a manifest's environment.image_digests and .versions come from (its ``images_from``)
IMAGES_FROM_CELLS = ("the cells' own containers: each one's image (docker inspect .Image) and the packages read "
                     "inside that image, gathered from every cell's images")
IMAGES_FROM_TAGS = ("the images' tags when the sweep started, not the cells' containers (a bundle from before "
                    "manifest version 2)")
PUBLISHER_228 = "mbedtls-2.28"  # the device stack of image testbed-publisher (publishers/virtual.py)


def manifest_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1's environment read the images' tags when the sweep started (the 2.28 publisher's even in a sweep
    that ran no 2.28 cell) and stated tcp_nodelay beside what it read. Version 2 takes the images from the cells'
    containers; a version-1 bundle keeps its values under the same keys, labelled with where they came from (an
    image its plan ran no container of left out), and tcp_nodelay under ``configured``."""
    env = data.get("environment")
    if not isinstance(env, dict) or not {"image_digests", "tcp_nodelay", "mbedtls", "openssl_broker"} & env.keys():
        return data  # a lab's environment (its hosts are in every cell) or none: nothing moves
    env = dict(env)
    digests = dict(env.pop("image_digests", None) or {})
    versions: dict[str, dict[str, str]] = {}
    for key, image in (("mosquitto", "broker"), ("openssl_broker", "broker"), ("mbedtls", "publisher")):
        text = env.pop(key, None)  # "<package> <version>", the first line dpkg-query printed
        if isinstance(text, str) and len(text.split()) == 2:
            package, version = text.split()
            versions.setdefault(image, {})[package] = version
    if not _ran_the_228_publisher(data.get("plan")):
        digests.pop("publisher", None)
        versions.pop("publisher", None)
    configured = {"configured": {"tcp_nodelay": env.pop("tcp_nodelay")}} if "tcp_nodelay" in env else {}
    env.update({k: v for k, v in (("image_digests", digests), ("versions", versions)) if v},
               images_from=IMAGES_FROM_TAGS, **configured)
    return {**data, "environment": env}


def _ran_the_228_publisher(plan: Any) -> bool:
    """Whether a plan's cells ran image testbed-publisher: a virtual device (or fleet) on mbedTLS 2.28."""
    if not isinstance(plan, dict):
        return True  # unknown: kept, labelled as read from the tag
    stacks = plan.get("device_stacks", plan.get("device_stack", [PUBLISHER_228]))
    return plan.get("publisher") != "esp32" and PUBLISHER_228 in (stacks if isinstance(stacks, list) else [stacks])


def metrics_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 named what a cell's events cost (--events) ``storm``; version 2 names it ``events``, as the option,
    the analysis (analysis/events.py) and the report's section do. Nothing else moved."""
    if "storm" not in data:
        return data
    out = {k: v for k, v in data.items() if k != "storm"}
    out["events"] = data["storm"]
    return out


MIGRATIONS: dict[Kind, dict[int, Migration]] = {"manifest": {1: manifest_1_to_2}, "metrics": {1: metrics_1_to_2},
                                                "cell": {0: dict, 1: dict}}
# Formats that were written without ``schema_version`` at first: such data is this version (cell.json before
# orchestrator/model/cell.py: version 0, the same keys as version 1). cell.json version 2 added ``order`` and ``lab``
# (a sweep's order and block, what of the lab was reused): version 1 is version 2 without them. manifest.json version
# 2: see manifest_1_to_2. metrics.json version 2: see metrics_1_to_2.
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
