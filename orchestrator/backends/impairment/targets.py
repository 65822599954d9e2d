"""Where to impair: targets found from the testbed's containers or from a multi-host lab inventory.

The containers' state (pid, address) comes from the typed docker backend (backends/docker.py).
"""

from __future__ import annotations

import ipaddress
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.backends import docker, ssh_masters
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget
from orchestrator.backends.process import run
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Direction
from orchestrator.model.yamlfile import NOT_FINITE

REQUIRED_GROUPS = ("broker", "router", "publisher")


def targets_for_containers(direction: Direction, containers: Mapping[str, str],
                           interface: str = "eth0") -> list[ImpairmentTarget]:
    """Targets for the testbed's containers on this Docker host, impaired through helper containers.

    ``containers`` maps ``publisher``, ``broker`` and ``subscriber`` to container names. Delay,
    jitter and rate act on the sender's egress (the broker's limited to packets towards the
    subscriber). Loss acts at the RECEIVER's ingress, inside its namespace, filtered on the
    sender's address: the broker-side capture then sees every original segment and its
    retransmission, so the measured retransmission rate is the injected loss.
    """
    def ip(role: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(docker.container_ip(containers[role]))

    targets: list[ImpairmentTarget] = []
    try:
        if direction.covers(Direction.PUBLISHER_TO_BROKER):
            targets.append(ImpairmentTarget(label="publisher", container=containers["publisher"],
                                            interface=interface))
            targets.append(ImpairmentTarget(label="publisher", container=containers["broker"], interface=interface,
                                            hook=Hook.INGRESS, source_ip=ip("publisher")))
        if direction.covers(Direction.BROKER_TO_SUBSCRIBER):
            targets.append(ImpairmentTarget(label="broker", container=containers["broker"], interface=interface,
                                            peer_ip=ip("subscriber")))
            targets.append(ImpairmentTarget(label="broker", container=containers["subscriber"],
                                            interface=interface, hook=Hook.INGRESS, source_ip=ip("broker")))
    except KeyError as exc:
        raise TestbedError(f"impairment {direction}: container for {exc.args[0]} not given") from None
    except ValidationError as exc:
        raise TestbedError(f"impairment target: {exc.errors()[0]['msg']}") from exc
    return targets


class LabInventory(BaseModel):
    """The groups a multi-host lab needs, read from ``ansible-inventory --list``."""

    model_config = ConfigDict(extra="forbid")

    source: str
    broker: list[str]
    router: list[str]
    publisher: list[str]
    hostvars: dict[str, dict[str, Any]]


def not_finite(hostvars: Mapping[str, Any]) -> list[str]:
    """``host: key: is not a finite number`` for every NaN or infinity among the hosts' variables (YAML's ``.nan``,
    ``.inf``; a number of ours or Ansible's read from an inventory is never one)."""
    found: list[str] = []

    def walk(where: str, value: Any) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            found.append(f"{where}: {NOT_FINITE} (got {value})")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{where}.{key}" if ": " in where else f"{where}: {key}", item)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(f"{where}[{i}]", item)

    for host, variables in hostvars.items():
        walk(str(host), variables)
    return found


def parse_inventory_listing(listing: Mapping[str, Any], source: str,
                            required: tuple[str, ...] = REQUIRED_GROUPS) -> LabInventory:
    """Validate ``ansible-inventory --list`` JSON: the ``required`` groups have hosts (all three unless told:
    a lab run without impairment needs no router) and router hosts say where."""
    hostvars = dict(listing.get("_meta", {}).get("hostvars", {}))

    def hosts_of(group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        entry = listing.get(group) or {}
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            if child not in seen:
                found += hosts_of(child, seen | {group})
        return sorted(set(found))

    groups = {g: hosts_of(g) for g in REQUIRED_GROUPS}
    missing = [g for g, hosts in groups.items() if not hosts and g in required]
    if missing:
        raise TestbedError(
            f"{source}: inventory lacks host(s) in group(s) {', '.join(missing)}",
            hint=f"this needs groups {', '.join(required)}; "
            "see playbooks/inventory.example.yml and docs/multi-host.md",
        )
    problems = not_finite(hostvars)
    for host in groups["router"]:
        hv = hostvars.get(host, {})
        if not hv.get("impair_egress_interface") and not hv.get("impair_ingress_interface"):
            problems.append(
                f"{host}: impair_egress_interface or impair_ingress_interface: missing (the router "
                "interface facing the broker, and the one facing the ESP32)"
            )
        for key in ("impair_egress_interface", "impair_ingress_interface"):
            value = hv.get(key)
            if value is not None and not isinstance(value, str):
                problems.append(f"{host}: {key}: must be an interface name")
        if hv.get("impair_peer_ip") is not None:
            try:
                ipaddress.ip_address(str(hv["impair_peer_ip"]))
            except ValueError:
                problems.append(f"{host}: impair_peer_ip: not an IP address ({hv['impair_peer_ip']!r})")
    if problems:
        raise TestbedError(f"{source}: invalid lab inventory", evidence="\n".join(problems))
    return LabInventory(source=source, hostvars=hostvars, **groups)


def load_inventory(path: Path, required: tuple[str, ...] = REQUIRED_GROUPS) -> LabInventory:
    """Read an inventory (INI or YAML) through ``ansible-inventory --list`` and validate it."""
    if not path.is_file():
        raise TestbedError(f"inventory file not found: {path}")
    tool = str(Path(sys.executable).parent / "ansible-inventory")
    argv = [tool if Path(tool).exists() else "ansible-inventory", "-i", str(path), "--list"]
    proc = run(argv, check=False, timeout=60, env={"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"})
    if proc.returncode != 0:
        raise TestbedError(f"{path}: ansible-inventory cannot parse it", evidence=proc.stderr.strip()[-2000:])
    lab = parse_inventory_listing(json.loads(proc.stdout), str(path), required)
    ssh_masters.note_inventory(lab.hostvars)  # the masters in its control path folders are closed at exit
    return lab


def targets_for_router(lab: LabInventory) -> list[ImpairmentTarget]:
    """Targets on the router hosts: their own interfaces in the host namespace (no netns)."""
    targets: list[ImpairmentTarget] = []
    for host in lab.router:
        hv = lab.hostvars.get(host, {})
        peer = ipaddress.ip_address(str(hv["impair_peer_ip"])) if hv.get("impair_peer_ip") else None
        if hv.get("impair_egress_interface"):
            targets.append(
                ImpairmentTarget(
                    label="publisher", host=host, interface=hv["impair_egress_interface"], peer_ip=peer
                )
            )
        if hv.get("impair_ingress_interface"):
            targets.append(
                ImpairmentTarget(
                    label="publisher",
                    host=host,
                    interface=hv["impair_ingress_interface"],
                    peer_ip=peer,
                    hook=Hook.INGRESS,
                )
            )
    return targets
