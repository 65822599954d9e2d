"""Throwaway containers that prove what a run needs, as `testbed doctor` runs them: a few-second capture
by the capture image into a folder, as the user a run's containers run as, and a helper listing qdiscs.

Only the command lines and the calls live here; what their results mean is decided in
``orchestrator/doctor/probes.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends import docker
from orchestrator.backends.docker import run_argv
from orchestrator.backends.images import spec
from orchestrator.backends.impairment.argv import helper_probe_argv
from orchestrator.backends.process import run
from orchestrator.errors import ToolError
from orchestrator.model.layout import DATA, Layout

CAPTURE_IMAGE = spec("capture").tag
SMOKE_SECONDS = 2


@dataclass(frozen=True)
class Said:
    """What a throwaway container's program did."""

    returncode: int
    stdout: str
    stderr: str


def _said(argv: list[str], timeout: float) -> Said:
    proc = run(argv, check=False, timeout=timeout)
    return Said(proc.returncode, proc.stdout, proc.stderr)


def smoke_name() -> str:
    """The smoke capture's container: ours (testbed-doctor-), one per doctor process."""
    return f"testbed-doctor-{os.getpid()}-capture"


def in_container(folder: Path, host_path: Path) -> str:
    """Where ``host_path`` (inside ``folder``) is seen by a container that mounts ``folder`` at /data."""
    return f"{DATA}/{host_path.relative_to(folder).as_posix()}"


def smoke_capture_argv(folder: Path, user: str, name: str) -> list[str]:
    """dumpcap of the capture image, as ``user``, on the loopback of an empty network namespace, writing
    the run folder's capture file (layout.py) of ``folder`` mounted at /data, as a run's capture does."""
    target = in_container(folder, Layout(folder).capture)
    return run_argv(CAPTURE_IMAGE, "-q", "-i", "lo", "-a", f"duration:{SMOKE_SECONDS}", "-w", target,
                    options=["--name", name, "--user", user, "--network", "none", "-v", f"{folder}:{DATA}",
                             "--entrypoint", "dumpcap"])


def smoke_capture(folder: Path, user: str) -> Said:
    """Run the smoke capture (its exit code and output, whatever they are); the container is removed
    even when the docker CLI times out."""
    name = smoke_name()
    try:
        return _said(smoke_capture_argv(folder.resolve(), user, name), timeout=90)
    except ToolError:
        docker.remove([name])
        raise


def helper_qdiscs_argv() -> list[str]:
    return helper_probe_argv("tc", "qdisc", "show", "dev", "lo")


def helper_qdiscs() -> Said:
    """``tc qdisc show dev lo`` in a throwaway impairment helper (its exit code and output)."""
    return _said(helper_qdiscs_argv(), timeout=60)
