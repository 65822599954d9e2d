"""A fleet's limits (--devices N > 1): every device holds one TCP connection, so one descriptor in the fleet
and one in the broker. Checked before the cell starts (the compose limit we set) and again on the broker
process itself once it runs (what the engine really gave it), with an error that names the limit.

The fleet binary checks its own process's limit the same way (firmware/platformio/host/src/fleet/fleet_main.cpp).
Mosquitto's own ``max_connections`` is unlimited in our configuration (orchestrator/lab/brokerconf.py sets none).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends import docker
from orchestrator.errors import TestbedError
from orchestrator.lab.broker import BROKER
from orchestrator.model.run import RunSpec

NOFILE = 16384  # compose/testbed.yml's TESTBED_NOFILE default: the broker's and the publisher's limit
MARGIN = 64  # the broker's listener, the subscriber, log and persistence files, the healthcheck's clients


def needed_descriptors(devices: int) -> int:
    return devices + MARGIN


def check_planned(spec: RunSpec, nofile: int = NOFILE) -> None:
    """Before anything starts: the limit the containers will be given holds the fleet."""
    if spec.is_fleet and needed_descriptors(spec.devices) > nofile:
        raise TestbedError(f"--devices {spec.devices} needs {needed_descriptors(spec.devices)} open files in the "
                           f"broker, above the containers' open-file limit (nofile {nofile}, TESTBED_NOFILE)",
                           hint=f"use at most {nofile - MARGIN} devices")


def open_file_limit(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The soft "Max open files" of a process, or None where it cannot be read."""
    try:
        text = (proc / str(pid) / "limits").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files"):].split()[0]
            return None if soft == "unlimited" else int(soft) if soft.isdigit() else None
    return None


def check_broker(spec: RunSpec) -> int | None:
    """Once the broker runs: its process's real limit holds the fleet (the engine may cap what compose asks,
    e.g. rootless Docker under a lower hard limit). Returns the limit read (None: not readable here)."""
    if not spec.is_fleet:
        return None
    limit = open_file_limit(docker.container_pid(BROKER.container()))
    if limit is not None and needed_descriptors(spec.devices) > limit:
        raise TestbedError(f"--devices {spec.devices} needs {needed_descriptors(spec.devices)} open files in the "
                           f"broker, but the Mosquitto process's open-file limit is {limit}",
                           hint="raise the engine's nofile limit (dockerd --default-ulimit nofile=...) or use "
                                f"at most {limit - MARGIN} devices")
    return limit
