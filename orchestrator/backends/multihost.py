"""A lab across hosts (docs/multi-host.md): the roles an inventory gives its hosts, and playbooks/lab.yml run on them.

Roles come from the groups that `ansible-inventory --list` reports (read and checked by
backends/impairment/targets.py): ONE broker host (broker, capture, subscriber, time echo), the publisher
host that runs the virtual device (``publisher_kind: virtual``, the default; ``esp32`` entries are listed for the
record and never contacted), and the router hosts (impairment on their own interfaces). Every host's files
go under ``<testbed_remote_dir>/lab`` there, which the teardown removes.

Several publisher hosts (``publisher_kind: virtual``, each with an optional ``publisher_weight``, a whole number
1..100, 1 by default): a fleet (--devices N) is dealt over them by weight (orchestrator/model/shares.py), each host
running its share; a single device runs on the first of them (``for_cell``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.backends.impairment.driver import PlaybookResult, run_playbook
from orchestrator.backends.impairment.targets import LabInventory, load_inventory
from orchestrator.errors import TestbedError
from orchestrator.model.shares import MAX_SHARE_WEIGHT

PLAYBOOK = "lab.yml"
DEFAULT_REMOTE_DIR = "/opt/mqtt-tls-testbed"  # as playbooks/deploy.yml
LAB_SUBDIR = "lab"
RUNTIMES = ("native", "compose")
PUBLISHER_KINDS = ("virtual", "esp32")
Runtime = Literal["native", "compose"]


class LabHost(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: Literal["broker", "publisher", "router"]
    address: str  # where Ansible reaches it (ansible_host, else its name)
    remote_dir: str | None = None  # broker and publisher hosts: testbed_remote_dir

    @property
    def lab_dir(self) -> str:
        """Everything of ours on the host: removed by the teardown."""
        return f"{self.remote_dir}/{LAB_SUBDIR}"


class LabRoles(BaseModel):
    """Who does what in one lab, checked before anything is contacted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    broker: LabHost
    runtime: Runtime
    broker_address: str  # what the publisher connects to (the address the router forwards to)
    publishers: list[LabHost]  # the virtual publisher hosts, in the inventory's order
    weights: list[int]  # each publisher host's publisher_weight (its share of a fleet)
    routers: list[LabHost]
    boards: list[str]  # publisher entries with publisher_kind esp32: never contacted
    hostvars: dict[str, dict[str, Any]]

    @property
    def publisher(self) -> LabHost:
        """The first publisher host: the one a single device runs on."""
        return self.publishers[0]

    @property
    def contacted(self) -> list[LabHost]:
        """The hosts a cell puts files and processes on."""
        return [self.broker, *self.publishers]

    @property
    def every_host(self) -> list[LabHost]:
        return [self.broker, *self.publishers, *self.routers]

    def for_cell(self, fleet: bool) -> LabRoles:
        """The roles of one cell: a fleet runs on every publisher host, one device on the first only (the others
        are not contacted)."""
        if fleet or len(self.publishers) == 1:
            return self
        return self.model_copy(update={"publishers": self.publishers[:1], "weights": self.weights[:1]})


def _remote_dir(host: str, hv: Mapping[str, Any], problems: list[str]) -> str:
    value = hv.get("testbed_remote_dir", DEFAULT_REMOTE_DIR)
    if not isinstance(value, str) or not value.startswith("/") or value.rstrip("/") == "" or "'" in value:
        problems.append(f"{host}: testbed_remote_dir: must be an absolute folder other than / (got {value!r})")
        return DEFAULT_REMOTE_DIR
    return value.rstrip("/")


def _address(host: str, hv: Mapping[str, Any]) -> str:
    return str(hv.get("ansible_host") or host)


def _check_broker_address(host: str, value: Any, problems: list[str]) -> None:
    if not isinstance(value, str) or not value:
        problems.append(f"{host}: broker_address: must be the broker host's IP address (got {value!r})")
        return
    try:
        ipaddress.ip_address(value)
    except ValueError:
        problems.append(f"{host}: broker_address: not an IP address ({value!r}); the publisher connects by "
                        "address (the TLS server name stays `broker`)")


def _weight(host: str, hv: Mapping[str, Any], problems: list[str]) -> int:
    value = hv.get("publisher_weight", 1)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # an INI inventory's numbers are strings
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARE_WEIGHT:
        if not (isinstance(value, float) and not math.isfinite(value)):  # already said: not a finite number
            problems.append(f"{host}: publisher_weight: must be a whole number 1..{MAX_SHARE_WEIGHT}, its share "
                            f"of a fleet (got {value!r})")
        return 1
    return value


def _publishers(lab: LabInventory, problems: list[str]) -> tuple[list[str], list[str]]:
    virtual: list[str] = []
    boards: list[str] = []
    for host in lab.publisher:
        kind = lab.hostvars.get(host, {}).get("publisher_kind", "virtual")
        if kind not in PUBLISHER_KINDS:
            problems.append(f"{host}: publisher_kind: must be one of {', '.join(PUBLISHER_KINDS)} (got {kind!r})")
        (virtual if kind == "virtual" else boards).append(host)
    if not virtual:
        problems.append("publisher: no host with publisher_kind virtual: a lab run starts the virtual device "
                        "(vdevice, or the fleet for --devices N) on one")
    return virtual, boards


def roles_of(lab: LabInventory) -> LabRoles:
    """The lab's roles, or one TestbedError listing every problem as ``host: key: message``."""
    problems: list[str] = []
    if len(lab.broker) != 1:
        problems.append(f"broker: exactly one host is needed, found {len(lab.broker)} ({', '.join(lab.broker)})")
    broker = lab.broker[0]
    bv = lab.hostvars.get(broker, {})
    runtime = bv.get("testbed_broker_runtime", "compose")
    if runtime not in RUNTIMES:
        problems.append(f"{broker}: testbed_broker_runtime: must be native (processes, no Docker) or compose "
                        f"(a Docker host), got {runtime!r}")
    if "broker_address" in bv:
        _check_broker_address(broker, bv["broker_address"], problems)
    publishers, boards = _publishers(lab, problems)
    if broker in publishers:
        problems.append(f"{broker}: is both the broker and the publisher host; give the publisher a host of its own")
    weights = [_weight(h, lab.hostvars.get(h, {}), problems) for h in publishers]
    routers = [LabHost(name=r, role="router", address=_address(r, lab.hostvars.get(r, {}))) for r in lab.router]
    remote = {h: _remote_dir(h, lab.hostvars.get(h, {}), problems) for h in (broker, *publishers)}
    if problems:
        raise TestbedError(f"{lab.source}: the inventory cannot run a lab", evidence="\n".join(problems),
                           hint="see docs/multi-host.md and playbooks/inventory.example.yml")
    return LabRoles(
        source=lab.source, runtime=runtime, routers=routers, boards=boards, hostvars=lab.hostvars, weights=weights,
        broker=LabHost(name=broker, role="broker", address=_address(broker, bv), remote_dir=remote[broker]),
        broker_address=str(bv.get("broker_address") or _address(broker, bv)),
        publishers=[LabHost(name=p, role="publisher", address=_address(p, lab.hostvars[p]), remote_dir=remote[p])
                    for p in publishers])


LAB_GROUPS = ("broker", "publisher")  # router: only to impair (measure/multihost.py checks it then)
_loaded: dict[tuple[str, int], tuple[LabRoles, LabInventory]] = {}


def load_lab(path: Path) -> tuple[LabRoles, LabInventory]:
    """The inventory's roles (read once per version of the file: a sweep asks for every cell)."""
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
    except OSError:
        key = (str(path), -1)
    if key not in _loaded:
        inventory = load_inventory(path, LAB_GROUPS)
        _loaded[key] = (roles_of(inventory), inventory)
    return _loaded[key]


def host_problems(result: PlaybookResult) -> list[str]:
    """What went wrong where, one line per problem, each naming its host (unreachable hosts first); the
    command line of a failed task is left out (a summary names the task and the error; the command line may
    carry paths and values that do not belong in one)."""
    lines = [f"host {h} became unreachable" for h in result.unreachable]
    for failure in result.failures:
        if any(failure.startswith(f"{h}: ") for h in result.unreachable):
            continue
        parts = failure.split(" | ")
        lines.append(" | ".join([parts[0], parts[-1]]) if len(parts) > 2 else failure)
    return lines


def run_lab(action: str, extravars: Mapping[str, Any], inventory: Path, *, cancellable: bool = True,
            check: bool = True, timeout_s: float | None = None, each_on_its_own: bool = False,
            stop_on_unreachable: bool = False) -> PlaybookResult:
    """playbooks/lab.yml with ``testbed_action`` = ``action``; ``check``: a TestbedError naming the host(s)
    when it did not succeed everywhere; ``timeout_s``: a bound on the whole action (each remote step has its own:
    backends/remote_bounds.py); ``each_on_its_own``: every host goes through the tasks at its own pace (Ansible's
    free strategy: a host that stopped answering does not hold the others at each task), for an action whose hosts
    do not wait for one another; ``stop_on_unreachable``: the action is cancelled as soon as a host is lost."""
    result = run_playbook(PLAYBOOK, {**extravars, "testbed_action": action}, inventory=inventory,
                          cancellable=cancellable, timeout_s=timeout_s,
                          env={"ANSIBLE_STRATEGY": "free"} if each_on_its_own else None,
                          stop_on_unreachable=stop_on_unreachable)
    if check and (result.status != "successful" or result.rc != 0):
        raise TestbedError(f"lab {action} failed: {'; '.join(host_problems(result)[:1]) or result.status}",
                           evidence="\n".join(host_problems(result)[:10]) or None,
                           hint="run the playbook by hand with -vvv (docs/multi-host.md)")
    return result
