"""Impairment of real containers entered from the host: targets from `docker inspect`, apply, clear.

The containers get no NET_ADMIN: tc and nft run on the host inside their network namespaces
(nsenter), and the nft drop sits on the host side of the sender's veth.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from orchestrator.backends import impairment as b
from orchestrator.backends.impairment import Hook
from orchestrator.model.impairment import Impairment

IMAGE = "testbed-base:bookworm"


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120, check=check)


@pytest.fixture
def containers() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to enter the containers' network namespaces")
    if docker("image", "inspect", IMAGE, check=False).returncode:
        pytest.skip(f"image {IMAGE} not built (make images)")
    tag = f"tbimp{os.getpid()}"
    names = {role: f"{tag}-{role}" for role in ("publisher", "broker", "subscriber")}
    try:
        docker("network", "create", tag)
        for name in names.values():
            docker("run", "-d", "--name", name, "--network", tag, IMAGE, "sleep", "300")
        yield names
    finally:
        docker("rm", "-f", *names.values(), check=False)
        docker("network", "rm", tag, check=False)


def _ns_text(pid: str, *argv: str) -> str:
    return subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", *argv], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def test_containers_are_impaired_from_the_host_and_cleared(containers: dict[str, str]) -> None:
    targets = b.targets_for_containers({"publisher": containers["publisher"], "broker": containers["broker"]},
                                       peers={"broker": containers["subscriber"]})
    sub_ip = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                    containers["subscriber"]).stdout.strip()
    pids = {role: docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
            for role, name in containers.items()}
    by_key = {(t.label, t.hook): t for t in targets}
    assert by_key[("publisher", Hook.EGRESS)].netns_path == f"/proc/{pids['publisher']}/ns/net"
    assert str(by_key[("broker", Hook.EGRESS)].peer_ip) == sub_ip
    # the ingress target is the host side of the publisher's veth: its peer is the container's eth0
    host_veth = by_key[("publisher", Hook.INGRESS)].interface
    inside = json.loads(_ns_text(pids["publisher"], "ip", "-j", "link", "show", "dev", "eth0"))[0]
    outside = json.loads(subprocess.run(["ip", "-j", "link", "show", "dev", host_veth], capture_output=True,
                                        text=True, check=True).stdout)[0]
    assert outside["ifindex"] == inside["link_index"]

    imp = Impairment(name="both-ways", loss_pct=2, rate_kbit=1000, direction="both")
    with b.impaired(imp, targets) as record:
        assert "qdisc tbf 7e57: root" in _ns_text(pids["publisher"], "tc", "qdisc", "show", "dev", "eth0")
        broker_qdiscs = _ns_text(pids["broker"], "tc", "qdisc", "show", "dev", "eth0")
        assert "qdisc htb 7e57: root" in broker_qdiscs and "qdisc tbf 7e59: parent 7e57:1" in broker_qdiscs
        table = subprocess.run(["nft", "list", "table", "inet", "testbed_impair"], capture_output=True,
                               text=True, check=True).stdout
        assert f'device "{host_veth}"' in table and f"ip daddr {sub_ip} numgen random mod 100 < 2" in table
        assert record.before != record.after
    for role in ("publisher", "broker"):
        assert " 7e5" not in _ns_text(pids[role], "tc", "qdisc", "show", "dev", "eth0")
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    assert "testbed_impair" not in tables
    assert not b.state_has_ours(record.after_clear or "")
