"""The lab's hosts as a test makes them (tests/integration/labhosts.py): Ansible reaches them over SSH, the
publisher's packets to the broker cross the router, and the router playbooks impair and clear its own interfaces.

Needs testbed-labhost:latest (`testbed images build`, which `make test` runs first).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends import impairment
from orchestrator.backends.remote_bounds import ansible_bounds_env
from orchestrator.model.impairment import Impairment

from . import labhosts
from .conftest import binomial_bounds
from .labhosts import CORE, EDGE, Lab, leftovers, open_lab, require_image

LOSS_PCT = 20
PINGS = 200


def test_teardown_removes_everything_when_setup_is_interrupted_with_a_host_paused(
        tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # first in the file: the module's lab below has the same names, and making a lab removes a previous one
    require_image(request.config)

    def ctrl_c(lab: Lab) -> None:  # instead of waiting for sshd: the hosts are up, one is frozen
        lab.pause("router")
        raise KeyboardInterrupt

    monkeypatch.setattr(labhosts, "_wait_for_ssh", ctrl_c)
    with pytest.raises(KeyboardInterrupt), open_lab(tmp_path):
        pytest.fail("not reached")
    assert leftovers() == []
    assert not (tmp_path / "lab").exists()  # the key went with the lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """One lab for the tests below (about 6 s to make)."""
    require_image(request.config)
    with open_lab(tmp_path_factory.mktemp("labhosts")) as made:
        yield made
    assert leftovers() == []
    masters = subprocess.run(["pgrep", "-af", str(made.folder)], capture_output=True, text=True, check=False)
    assert masters.stdout == ""  # no ssh master connection (ours, Ansible's) outlives the lab


def _ansible_ping(lab: Lab) -> dict[str, str]:
    """host -> "pong", "unreachable" or "failed": ansible.builtin.ping on every host of the inventory, run by
    ansible-runner as the impairment driver runs its playbooks (results read from its events; the product's time
    bounds: the inventory sets no keepalive)."""
    import ansible_runner

    kinds = {"runner_on_ok": "ok", "runner_on_unreachable": "unreachable", "runner_on_failed": "failed"}
    found: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="testbed-ansible-") as private:
        runner = ansible_runner.run(private_data_dir=private, inventory=str(lab.inventory), host_pattern="all",
                                    module="ansible.builtin.ping", cmdline="-T 3", quiet=True,
                                    envvars={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                                             **ansible_bounds_env()})  # a paused host: lost, not waited for
        for ev in runner.events:
            data = ev.get("event_data", {})
            if ev.get("event") in kinds and "host" in data:
                kind = kinds[ev["event"]]
                found[data["host"]] = data.get("res", {}).get("ping", "?") if kind == "ok" else kind
    return found


def test_ansible_reaches_every_host_over_ssh_and_not_a_paused_one(lab: Lab) -> None:
    names = {h.name for h in lab.hosts.values()}
    assert _ansible_ping(lab) == dict.fromkeys(names, "pong")
    lab.pause("publisher")
    try:
        status = _ansible_ping(lab)
        cut_off = lab.ssh("publisher", "true", timeout=20)
    finally:
        lab.unpause("publisher")
    assert cut_off.returncode == 255 and "timed out" in cut_off.stderr
    assert status == {**dict.fromkeys(names, "pong"), lab.hosts["publisher"].name: "unreachable"}


def _nft(lab: Lab, *commands: str) -> str:
    out = []
    for command in commands:
        proc = lab.ssh("router", *["nft", *command.split()])
        assert proc.returncode == 0, f"nft {command}: {proc.stderr}"
        out.append(proc.stdout)
    return "".join(out)


def _ping(lab: Lab, count: int, interval: str = "0.2") -> tuple[int, str]:
    """Echo requests from the publisher host to the broker's core address: (replies received, ping's output)."""
    proc = lab.ssh("publisher", "ping", "-n", "-c", str(count), "-i", interval, "-W", "1",
                   lab.hosts["broker"].addresses[CORE])
    m = re.search(r"(\d+) packets transmitted, (\d+) received", proc.stdout)
    assert m and int(m.group(1)) == count, proc.stdout + proc.stderr
    return int(m.group(2)), proc.stdout


def test_publisher_to_broker_crosses_the_router(lab: Lab) -> None:
    pub, broker = lab.hosts["publisher"].addresses[EDGE], lab.hosts["broker"].addresses[CORE]
    table = "inet testbed_labcheck"
    _nft(lab, f"add table {table}",
         f"add chain {table} labcheck {{ type filter hook forward priority 0 ; policy accept ; }}",
         f"add rule {table} labcheck ip saddr {pub} ip daddr {broker} icmp type echo-request counter")
    try:
        received, out = _ping(lab, 3)
        counted = _nft(lab, f"list chain {table} labcheck")
    finally:
        _nft(lab, f"delete table {table}")
    assert received == 3
    assert "ttl=63" in out  # the reply crossed one router on its way back
    assert re.search(r"icmp type echo-request counter packets 3 bytes", counted), counted
    # how: each end host routes the other side's subnet through the router
    router = lab.hosts["router"].addresses
    assert f"{lab.subnets[CORE]} via {router[EDGE]} dev" in lab.ssh("publisher", "ip", "route").stdout
    assert f"{lab.subnets[EDGE]} via {router[CORE]} dev" in lab.ssh("broker", "ip", "route").stdout


def _ours_on_router(lab: Lab) -> list[str]:
    r = lab.hosts["router"]
    qdiscs = [lab.ssh(r, "tc", "qdisc", "show", "dev", r.interfaces[net]).stdout for net in (EDGE, CORE)]
    found = [line for text in qdiscs for line in text.splitlines() if " 7e5" in line]
    tables = lab.ssh(r, "nft", "list", "tables").stdout
    return found + [line for line in tables.splitlines() if "testbed_" in line]


def test_the_impair_playbook_drops_on_the_routers_ingress_and_clear_leaves_nothing(lab: Lab) -> None:
    """impair.yml / clear.yml on the router through the inventory, driven as `testbed impair --inventory` and a
    lab run drive them (the plan as extra vars, through ansible-runner)."""
    inventory = impairment.load_inventory(lab.inventory)  # validated as the CLI does
    targets = impairment.targets_for_router(inventory)
    router = lab.hosts["router"]
    assert {(t.host, t.interface, t.hook.value) for t in targets} == {
        (router.name, router.interfaces[EDGE], "ingress"), (router.name, router.interfaces[CORE], "egress")}
    imp = Impairment(name=f"lossy-{LOSS_PCT}pct", loss_pct=LOSS_PCT)
    with impairment.impaired(imp, targets, inventory=lab.inventory) as record:
        received, _out = _ping(lab, PINGS, interval="0.01")
    lost = PINGS - received
    lo, hi = binomial_bounds(PINGS, LOSS_PCT / 100)
    assert lo <= lost <= hi, f"{lost} of {PINGS} lost at {LOSS_PCT} %"
    broker = lab.hosts["broker"].addresses[CORE]
    assert f'device "{router.interfaces[EDGE]}"' in record.after
    assert f"ip daddr {broker} numgen random mod 100 < {LOSS_PCT} counter packets 0 bytes 0 drop" in record.after
    # every lost echo request was our drop: the router's one table, listed once per target (egress and ingress)
    counters = re.findall(r"counter packets (\d+) bytes \d+ drop", record.before_clear or "")
    assert counters == [str(lost)] * len(targets), record.before_clear
    assert record.after_clear is not None and not impairment.state_has_ours(record.after_clear)
    assert _ours_on_router(lab) == []
    assert _ping(lab, 3)[0] == 3  # nothing lost once cleared
