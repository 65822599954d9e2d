"""What a report says of a bundle that reran another's plan (`testbed sweep --plan`, orchestrator/measure/replay.py):
a row of the bundle's first table, and a sentence of `testbed compare`'s first lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Made(Protocol):  # what is read of a bundle (results/bundle.py's Bundle)
    root: Path
    manifest: dict[str, Any]


def reproduces_row(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """The row naming the bundle whose plan this one reran, if it did."""
    r = manifest.get("reproduces")
    if not isinstance(r, dict):
        return []
    text = (f"{r.get('name')} (created {r.get('created_utc')}, tool {r.get('tool_version')}): its plan rerun "
            "exactly by testbed sweep --plan; testbed compare of the two is the reproducibility check")
    changed = r.get("host_options") or {}
    if changed:
        text += "; this host's options: " + ", ".join(f"{k} {v.get('recorded')} -> {v.get('now')}"
                                                      for k, v in changed.items())
    return [("reproduces", text)]


def rerun_sentence(a: Made, b: Made) -> str:
    """' B reproduces A (...)' when one bundle is the other's plan rerun by `testbed sweep --plan`."""
    for new, old, x, y in ((b, a, "B", "A"), (a, b, "A", "B")):
        source = new.manifest.get("reproduces")
        if isinstance(source, dict) and source.get("name") == old.root.name:
            return (f" {x} reproduces {y}: {y}'s plan rerun by testbed sweep --plan (same cells, order, seed and "
                    "options), so this is the reproducibility check.")
    return ""
