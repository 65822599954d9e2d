"""Where the testbed's own files are (the tree: compose/, images/, firmware/platformio/, playbooks/) and where it
keeps its state and caches.

In a checkout the tree is the checkout (TESTBED_HOME names one; else the one this package lies in). An installed
package carries the tree as package data, ``orchestrator/_tree``, read through importlib.resources: the wheel maps
those same folders of the checkout there (setup.py and pyproject.toml's package-data), so the checkout holds no
second copy. State (`testbed up`'s session) and caches are .testbed/ and .cache/ of a checkout, else the user's XDG
state and cache folders: never inside the installed package.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from orchestrator.errors import TestbedError

TREE_DATA = "_tree"  # the package data folder of an installed package: orchestrator/_tree


def is_tree(path: Path) -> bool:
    return (path / "compose" / "testbed.yml").is_file() and (path / "images").is_dir()


def package_parent() -> Path:
    """The folder holding the orchestrator package: a checkout's root, or site-packages."""
    return Path(__file__).resolve().parent.parent


def checkout() -> Path | None:
    """The checkout in use (TESTBED_HOME, else the one this package lies in), None for an installed package."""
    env = os.environ.get("TESTBED_HOME")
    if env:
        if not is_tree(Path(env)):
            raise TestbedError(f"TESTBED_HOME={env} is not a testbed checkout (no compose/testbed.yml, images/)",
                               hint="unset TESTBED_HOME, or set it to a clone of the testbed")
        return Path(env).resolve()
    parent = package_parent()
    return parent if is_tree(parent) else None


def tree() -> Path:
    """The root of the testbed's files: the checkout, else the installed package's orchestrator/_tree."""
    found = checkout()
    if found is not None:
        return found
    packaged = Path(str(importlib.resources.files("orchestrator").joinpath(TREE_DATA)))
    if is_tree(packaged):
        return packaged
    raise TestbedError("cannot find the testbed's files (compose/testbed.yml, images/) in the checkout or in the "
                       f"installed package ({packaged})",
                       hint="reinstall the package from its wheel (`pipx install mqtt-tls-testbed`), or set "
                       "TESTBED_HOME to a clone")


def source(rel: str) -> Path:
    """A file or folder named as in the checkout: ``orchestrator/...`` is the package itself, the rest the tree."""
    found = checkout()
    if found is not None:
        return found / rel
    return package_parent() / rel if rel.split("/", 1)[0] == "orchestrator" else tree() / rel


def compose_file() -> Path:
    return tree() / "compose" / "testbed.yml"


def _xdg(variable: str, fallback: str) -> Path:
    base = os.environ.get(variable) or ""
    return (Path(base) if Path(base).is_absolute() else Path.home() / fallback) / "testbed"


def state_dir() -> Path:
    """Where `testbed up` keeps its live session (config, pki, logs): .testbed/ in a checkout, else
    $XDG_STATE_HOME/testbed (~/.local/state/testbed)."""
    found = checkout()
    return found / ".testbed" if found is not None else _xdg("XDG_STATE_HOME", ".local/state")


def cache_dir() -> Path:
    """.cache/ in a checkout, else $XDG_CACHE_HOME/testbed (~/.cache/testbed)."""
    found = checkout()
    return found / ".cache" if found is not None else _xdg("XDG_CACHE_HOME", ".cache")
