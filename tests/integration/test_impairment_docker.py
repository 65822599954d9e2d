"""Impairment of real containers through helper containers: targets from `docker inspect`, apply, clear.

The containers get no NET_ADMIN: tc and nft run in a helper container per impaired container that
shares its network namespace (NET_ADMIN only); the nft drop sits at the receiver's ingress, inside its
namespace. What is applied is read independently, from the host with nsenter (the test runs as root).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from orchestrator.backends import impairment as b
from orchestrator.backends.impairment import Hook
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Direction, Impairment
from tests.skips import skip_or_fail

from .conftest import helpers

# any image `testbed images build` makes will do (tests/conftest.py's Docker gate requires this one): the containers
# only sleep, and the helpers (testbed-netadmin) do the impairing
IMAGE = "testbed-subscriber:latest"


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120, check=check)


@pytest.fixture
def containers() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        skip_or_fail("needs root to read the containers' namespaces independently, with nsenter (CI runs as root)")
    tag = f"tbimp{os.getpid()}"
    names = {role: f"{tag}-{role}" for role in ("publisher", "broker", "subscriber")}
    try:
        docker("network", "create", tag)
        for name in names.values():
            docker("run", "-d", "--name", name, "--network", tag, "--entrypoint", "sleep", IMAGE, "300")
        yield names
    finally:
        docker("rm", "-f", *names.values(), check=False)
        docker("network", "rm", tag, check=False)


def _ns_text(pid: str, *argv: str) -> str:
    return subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", *argv], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def test_containers_are_impaired_through_helpers_and_cleared(containers: dict[str, str]) -> None:
    targets = b.targets_for_containers(Direction.BOTH, containers)
    ips = {role: docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                        name).stdout.strip() for role, name in containers.items()}
    pids = {role: docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
            for role, name in containers.items()}
    sub_ip = ips["subscriber"]
    by_key = {(t.label, t.hook): t for t in targets}
    assert by_key[("publisher", Hook.EGRESS)].container == containers["publisher"]
    assert str(by_key[("broker", Hook.EGRESS)].peer_ip) == sub_ip
    # loss sits at the receiver's ingress, inside its namespace, filtered on the sender's address
    pub_in = by_key[("publisher", Hook.INGRESS)]
    assert pub_in.container == containers["broker"] and str(pub_in.source_ip) == ips["publisher"]
    sub_in = by_key[("broker", Hook.INGRESS)]
    assert sub_in.container == containers["subscriber"] and str(sub_in.source_ip) == ips["broker"]

    imp = Impairment(name="both-ways", loss_pct=2, rate_kbit=1000, direction="both")
    with b.impaired(imp, targets) as record:
        assert len(helpers()) == 3  # one per impaired container
        assert "qdisc tbf 7e57: root" in _ns_text(pids["publisher"], "tc", "qdisc", "show", "dev", "eth0")
        broker_qdiscs = _ns_text(pids["broker"], "tc", "qdisc", "show", "dev", "eth0")
        assert "qdisc htb 7e57: root" in broker_qdiscs and "qdisc tbf 7e59: parent 7e57:1" in broker_qdiscs
        table = _ns_text(pids["broker"], "nft", "list", "table", "inet", "testbed_impair")
        assert 'device "eth0"' in table and f"ip saddr {ips['publisher']} numgen random mod 100 < 2" in table
        assert record.before != record.after
    for role in ("publisher", "broker", "subscriber"):
        assert " 7e5" not in _ns_text(pids[role], "tc", "qdisc", "show", "dev", "eth0")
        assert "testbed_impair" not in _ns_text(pids[role], "nft", "list", "tables")
    assert not b.state_has_ours(record.after_clear or "")
    assert helpers() == []  # the helpers live exactly as long as the impairment


def test_a_helper_that_dies_mid_block_fails_it_and_the_impairment_is_still_cleared(
        containers: dict[str, str]) -> None:
    targets = b.targets_for_containers(Direction.PUBLISHER_TO_BROKER, containers)
    pids = {role: docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
            for role, name in containers.items()}
    imp = Impairment(name="lossy", loss_pct=3)
    with pytest.raises(TestbedError, match="impairment helper died during the cell") as err:
        with b.impaired(imp, targets) as record:
            docker("kill", f"{containers['broker']}-netadmin")
    assert f"{containers['broker']}-netadmin (exited" in err.value.message
    # read and cleared through a fresh helper: the drop rule's counters are in the record, nothing remains
    assert "numgen random mod 100 < 3" in (record.before_clear or "")
    assert "testbed_impair" not in _ns_text(pids["broker"], "nft", "list", "tables")
    assert helpers() == []


def test_a_target_that_is_not_running_is_refused_before_anything_is_applied(containers: dict[str, str]) -> None:
    targets = b.targets_for_containers(Direction.PUBLISHER_TO_BROKER, containers)
    docker("stop", "-t", "0", containers["publisher"])
    with pytest.raises(TestbedError, match="is not running"):
        with b.impaired(Impairment(name="narrow", rate_kbit=500), targets):
            pass
    assert helpers() == []
