"""Where the testbed's own files are: the source tree (compose/, images/) and the state folder."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.errors import TestbedError


def repo_root() -> Path:
    """The checkout holding compose/ and images/ (TESTBED_HOME overrides)."""
    env = os.environ.get("TESTBED_HOME")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parent.parent)
    candidates.append(Path.cwd())
    for c in candidates:
        if (c / "compose" / "testbed.yml").is_file() and (c / "images").is_dir():
            return c
    raise TestbedError("cannot find the testbed source tree (compose/testbed.yml, images/)",
                       hint="run testbed from its checkout or set TESTBED_HOME to it")


def compose_file() -> Path:
    return repo_root() / "compose" / "testbed.yml"


def state_dir() -> Path:
    """Where `testbed up` keeps its live session (config, pki, logs): .testbed/ in the checkout."""
    return repo_root() / ".testbed"


def cache_dir() -> Path:
    return repo_root() / ".cache"
