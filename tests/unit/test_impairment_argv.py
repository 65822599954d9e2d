"""Impairment command lines, plans, state parsing and inventories, without touching the host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.impairment import driver
from orchestrator.backends.impairment.argv import (
    apply_argvs,
    clear_argvs,
    enter_argv,
    netem_options,
    netem_probe_argv,
    show_argvs,
    tbf_burst_bytes,
)
from orchestrator.backends.impairment.cli_plan import main
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget
from orchestrator.backends.impairment.plan import build_plan, state_has_ours
from orchestrator.backends.impairment.targets import load_inventory, parse_inventory_listing, targets_for_router
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Impairment, load_impairment

REPO = Path(__file__).resolve().parents[2]
NS = "/proc/4242/ns/net"
ENTER = ["nsenter", f"--net={NS}"]
PUB = ImpairmentTarget(label="publisher", netns_path=NS, interface="eth0")
PUB_HOST_SIDE = ImpairmentTarget(label="publisher", interface="veth1a2b3c4", hook=Hook.INGRESS)
BROKER = ImpairmentTarget(label="broker", netns_path=NS, interface="eth0", peer_ip="172.20.0.4")


def test_rate_only_is_one_tbf_at_the_root() -> None:
    assert apply_argvs(load_impairment("narrowband-250kbit"), PUB) == [
        ENTER + ["tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "7e57:",
                 "tbf", "rate", "250kbit", "burst", "1600", "latency", "100ms"],
    ]


def test_loss_only_is_an_nft_random_drop_at_the_ingress_target() -> None:
    imp = load_impairment("lossy-5pct")
    assert apply_argvs(imp, PUB) == []  # never at a local sender's egress
    assert apply_argvs(imp, PUB_HOST_SIDE) == [
        ["nft", "add", "table", "inet", "testbed_impair"],
        ["nft", "add", "chain", "inet", "testbed_impair", "publisher_veth1a2b3c4",
         "{", "type", "filter", "hook", "ingress", "device", '"veth1a2b3c4"', "priority", "0", ";",
         "policy", "accept", ";", "}"],
        ["nft", "add", "rule", "inet", "testbed_impair", "publisher_veth1a2b3c4",
         "numgen", "random", "mod", "100", "<", "5", "counter", "drop"],
    ]


def test_fractional_loss_uses_hundredths_and_peer_filter() -> None:
    imp = Impairment(name="x", loss_pct=0.25, direction="broker->subscriber")
    target = ImpairmentTarget(label="broker", interface="vethb", hook=Hook.INGRESS, peer_ip="fd00::4")
    rule = apply_argvs(imp, target)[-1]
    assert rule[:7] == ["nft", "add", "rule", "inet", "testbed_impair", "broker_vethb", "ip6"]
    assert rule[6:] == ["ip6", "daddr", "fd00::4", "numgen", "random", "mod", "10000", "<", "25",
                        "counter", "drop"]


def test_netem_carries_delay_jitter_distribution_and_correlated_loss_with_tbf_below() -> None:
    assert apply_argvs(load_impairment("wifi-congested"), PUB) == [
        ENTER + ["tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "7e57:", "netem",
                 "delay", "40ms", "20ms", "distribution", "paretonormal", "loss", "random", "2%", "25%"],
        ENTER + ["tc", "qdisc", "add", "dev", "eth0", "parent", "7e57:1", "handle", "7e59:",
                 "tbf", "rate", "5000kbit", "burst", "6250", "latency", "100ms"],
    ]


def test_uniform_jitter_has_no_distribution_table() -> None:
    imp = Impairment(name="x", delay_ms=10, jitter_ms=2.5)
    assert netem_options(imp) == ["delay", "10ms", "2.5ms"]


def test_peer_filtered_egress_uses_htb_class_and_u32_filter() -> None:
    imp = Impairment(name="x", delay_ms=20, rate_kbit=500, direction="broker->subscriber")
    dev = ["dev", "eth0"]
    assert apply_argvs(imp, BROKER) == [
        ENTER + ["tc", "qdisc", "replace", *dev, "root", "handle", "7e57:", "htb", "default", "0"],
        ENTER + ["tc", "class", "add", *dev, "parent", "7e57:", "classid", "7e57:1", "htb", "rate", "10gbit",
                 "quantum", "60000"],
        ENTER + ["tc", "qdisc", "add", *dev, "parent", "7e57:1", "handle", "7e58:", "netem", "delay", "20ms"],
        ENTER + ["tc", "qdisc", "add", *dev, "parent", "7e58:1", "handle", "7e59:",
                 "tbf", "rate", "500kbit", "burst", "1600", "latency", "100ms"],
        ENTER + ["tc", "filter", "add", *dev, "parent", "7e57:", "protocol", "ip", "prio", "1", "u32",
                 "match", "ip", "dst", "172.20.0.4/32", "flowid", "7e57:1"],
    ]


def test_direction_selects_the_targets() -> None:
    imp = load_impairment("narrowband-250kbit")  # publisher->broker
    assert apply_argvs(imp, BROKER) == []
    both = Impairment(name="x", rate_kbit=250, direction="both")
    assert apply_argvs(both, BROKER) != [] and apply_argvs(both, PUB) != []
    assert apply_argvs(load_impairment("none"), PUB) == []


def test_tbf_burst_is_ten_ms_of_traffic_but_at_least_one_frame() -> None:
    assert tbf_burst_bytes(250) == 1600
    assert tbf_burst_bytes(100_000) == 125_000  # 100 Mbit/s for 10 ms
    # the bucket lets a 1 s window exceed the rate by burst/rate: 1600 B / 31250 B = 5.1 % < 10 %
    assert tbf_burst_bytes(250) / (250_000 / 8) < 0.10


def test_clear_removes_only_our_handle_and_table_and_tolerates_absence() -> None:
    assert [c.argv for c in clear_argvs(PUB)] == [
        ENTER + ["tc", "qdisc", "del", "dev", "eth0", "root", "handle", "7e57:"]]
    cmds = clear_argvs(PUB_HOST_SIDE)
    assert [c.argv for c in cmds] == [
        ["tc", "qdisc", "del", "dev", "veth1a2b3c4", "root", "handle", "7e57:"],
        ["nft", "add", "table", "inet", "testbed_impair"],
        ["nft", "delete", "table", "inet", "testbed_impair"],
    ]
    assert "Invalid handle" in cmds[0].tolerate  # the kernel's answer when the root qdisc is not ours


def test_show_lists_qdiscs_and_our_table() -> None:
    assert [c.argv for c in show_argvs(PUB)] == [
        ENTER + ["tc", "qdisc", "show", "dev", "eth0"],
        ENTER + ["nft", "list", "table", "inet", "testbed_impair"],
    ]


def test_netem_probe_uses_a_throwaway_namespace() -> None:
    # an inventory host, as root: a namespace that vanishes with the command
    assert netem_probe_argv(in_helper=False) == ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root",
                                                 "netem", "delay", "1ms"]
    # this Docker host: a throwaway helper container with its own empty namespace and NET_ADMIN only
    argv = netem_probe_argv()
    assert argv[:3] == ["docker", "run", "--rm"] and argv[argv.index("--network") + 1] == "none"
    assert argv[argv.index("--cap-drop") + 1] == "ALL" and argv.count("--cap-add") == 1
    assert argv[argv.index("--cap-add") + 1] == "NET_ADMIN" and "--privileged" not in argv
    assert argv[-10:] == ["tc", "testbed-netadmin:latest", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                          "1ms"][-10:]


CONTAINER_PUB = ImpairmentTarget(label="publisher", container="testbed-publisher-1", interface="eth0")


def test_container_targets_run_in_their_helper_with_docker_exec() -> None:
    assert CONTAINER_PUB.helper == "testbed-publisher-1-netadmin"
    assert enter_argv(CONTAINER_PUB) == ["docker", "exec", "testbed-publisher-1-netadmin"]
    assert apply_argvs(load_impairment("narrowband-250kbit"), CONTAINER_PUB)[0][:5] == [
        "docker", "exec", "testbed-publisher-1-netadmin", "tc", "qdisc"]
    plan = build_plan(load_impairment("narrowband-250kbit"), [CONTAINER_PUB])
    assert plan["testbed_netem_probe"][:2] == ["docker", "run"]  # probed in a helper, not with unshare


def test_a_container_target_cannot_also_name_a_namespace_or_host() -> None:
    with pytest.raises(ValueError, match="not both"):
        ImpairmentTarget(label="publisher", container="testbed-publisher-1", netns_path=NS, interface="eth0")
    with pytest.raises(ValueError, match="not both"):
        ImpairmentTarget(label="publisher", container="testbed-publisher-1", host="router1", interface="eth0")
    with pytest.raises(ValueError):
        ImpairmentTarget(label="publisher", container="bad name;rm", interface="eth0")


def test_helper_options_give_net_admin_and_nothing_more() -> None:
    from orchestrator.backends.impairment.helpers import helper_options

    opts = helper_options("testbed-broker-1")
    assert opts[opts.index("--network") + 1] == "container:testbed-broker-1"
    assert [opts[i + 1] for i, o in enumerate(opts) if o == "--cap-add"] == ["NET_ADMIN"]
    assert opts[opts.index("--cap-drop") + 1] == "ALL"
    for forbidden in ("--privileged", "--pid", "-v", "--volume", "--mount", "--userns"):
        assert forbidden not in opts


def test_loss_without_an_ingress_target_is_refused_before_anything_runs() -> None:
    with pytest.raises(TestbedError, match="no ingress target for publisher->broker"):
        build_plan(load_impairment("lossy-5pct"), [PUB])
    with pytest.raises(TestbedError, match="no egress target for publisher->broker"):
        build_plan(load_impairment("narrowband-250kbit"), [PUB_HOST_SIDE])


def test_duplicate_targets_are_refused() -> None:
    with pytest.raises(TestbedError, match="two impairment targets share egress eth0"):
        build_plan(load_impairment("none"), [PUB, PUB])


def test_target_validation_messages() -> None:
    with pytest.raises(ValueError, match="must be one of publisher, broker"):
        ImpairmentTarget(label="subscriber", interface="eth0")
    with pytest.raises(ValueError, match="absolute path"):
        ImpairmentTarget(label="publisher", netns_path="proc/1/ns/net", interface="eth0")
    with pytest.raises(ValueError):
        ImpairmentTarget(label="publisher", interface="eth0; rm -rf /")


def test_plan_groups_commands_per_inventory_host() -> None:
    router = ImpairmentTarget(label="publisher", host="router1", interface="wlan0", hook=Hook.INGRESS)
    plan = build_plan(load_impairment("lossy-1pct"), [PUB, PUB_HOST_SIDE, router])
    assert plan["testbed_hosts"] == "localhost,router1"
    assert plan["testbed_needs_netem"] is False
    assert [c["argv"][-3:] for c in plan["testbed_plan"]["router1"]["apply"]][-1] == ["1", "counter", "drop"]
    assert len(plan["testbed_plan"]["localhost"]["apply"]) == 3
    assert json.loads(json.dumps(plan)) == plan  # plain data for ansible extra vars


def test_plan_command_line_prints_the_same_plan(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "lossy-5pct", "--target", f"publisher={NS}:eth0",
                 "--target", "publisher=host:veth1a2b3c4:ingress"])
    assert rc == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == build_plan(load_impairment("lossy-5pct"), [PUB, PUB_HOST_SIDE])


def test_plan_command_line_refuses_bad_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("loss_pct: 150\n")
    assert main(["plan", str(bad), "--target", f"publisher={NS}:eth0"]) == 2
    err = capsys.readouterr().err
    assert "loss_pct: must be a percentage between 0 and 100 (got 150" in err


SHOW_CLEAN = """$ [localhost] nsenter --net=/x tc qdisc show dev eth0
qdisc noqueue 0: root refcnt 2
$ [localhost] nsenter --net=/x nft list table inet testbed_impair
(absent: Error: No such file or directory)
"""
SHOW_OURS = """$ [localhost] tc qdisc show dev eth0
qdisc htb 7e57: root refcnt 3 r2q 10 default 0 direct_packets_stat 0 direct_qlen 1000
qdisc tbf 7e59: parent 7e57:1 rate 250Kbit burst 1600b lat 100ms
"""


def test_state_parser_spots_our_objects_only() -> None:
    assert not state_has_ours(SHOW_CLEAN)
    assert state_has_ours(SHOW_OURS)
    assert state_has_ours("table inet testbed_impair {\n}\n")
    assert not state_has_ours("qdisc tbf 1: root refcnt 2 rate 1Mbit\ntable inet filter {\n}\n")


def test_runner_events_become_items_and_failures() -> None:
    events = [
        {"event": "runner_item_on_ok", "event_data": {"host": "localhost", "task": "show state", "res": {
            "item": {"label": "publisher", "argv": ["tc", "qdisc", "show"]}, "rc": 0,
            "stdout": "qdisc noqueue 0: root", "stderr": ""}}},
        {"event": "runner_item_on_failed", "event_data": {"host": "localhost", "task": "apply", "res": {
            "item": {"label": "publisher", "argv": ["tc"]}, "rc": 2, "cmd": ["tc", "qdisc", "add"],
            "stdout": "", "stderr": "Error: Specified qdisc kind is unknown."}}},
        {"event": "runner_on_failed", "event_data": {"host": "localhost", "task": "apply", "res": {
            "results": [], "msg": "One or more items failed"}}},
        {"event": "runner_on_failed", "event_data": {"host": "localhost", "task": "preflight", "res": {
            "msg": "kernel lacks sch_netem: profile wifi-good ..."}}},
    ]
    items, failures = driver._event_items(iter(events))
    assert [i["failed"] for i in items] == [False, True]
    assert failures == [
        "localhost: apply | tc qdisc add | Error: Specified qdisc kind is unknown.",
        "localhost: preflight | kernel lacks sch_netem: profile wifi-good ...",
    ]
    result = driver.PlaybookResult(playbook="impair.yml", status="failed", rc=2, items=items, failures=failures)
    module = [{"event": "runner_on_failed", "event_data": {"host": "h1", "task": "apply", "res": {
        "msg": "1 of 2 commands failed", "testbed_items": [
            {"item": {"label": "p", "argv": ["tc", "a"]}, "cmd": ["tc", "a"], "rc": 0, "stdout": "", "stderr": "",
             "failed": False},
            {"item": {"label": "p", "argv": ["tc", "b"]}, "cmd": ["tc", "b"], "rc": 1, "stdout": "",
             "stderr": "RTNETLINK answers: File exists", "failed": True}]}}}]
    m_items, m_failures = driver._event_items(iter(module))
    assert [(i["item"]["argv"], i["failed"]) for i in m_items] == [(["tc", "a"], False), (["tc", "b"], True)]
    assert m_failures == ["h1: apply | tc b | RTNETLINK answers: File exists"]
    with pytest.raises(TestbedError) as err:
        driver._raise_failed(result, "applying")
    assert err.value.message == "kernel lacks sch_netem: profile wifi-good ..."
    state = driver._render_state(result, "show state")
    assert state == "$ [localhost] tc qdisc show\nqdisc noqueue 0: root\n"


LISTING = {
    "_meta": {"hostvars": {"lab-laptop": {"impair_egress_interface": "eth0",
                                          "impair_ingress_interface": "wlan0",
                                          "impair_peer_ip": "192.168.50.10"}}},
    "all": {"children": ["ungrouped", "broker", "router", "publisher"]},
    "broker": {"hosts": ["docker-host"]},
    "router": {"hosts": ["lab-laptop"]},
    "publisher": {"children": ["esp32s"]},
    "esp32s": {"hosts": ["esp32-1"]},
}


def test_inventory_groups_are_required() -> None:
    listing = {k: v for k, v in LISTING.items() if k != "router"}
    with pytest.raises(TestbedError, match=r"lab.yml: inventory lacks host\(s\) in group\(s\) router"):
        parse_inventory_listing(listing, "lab.yml")


def test_router_hosts_must_name_their_interfaces() -> None:
    listing = json.loads(json.dumps(LISTING))
    listing["_meta"]["hostvars"]["lab-laptop"] = {"impair_peer_ip": "not-an-ip"}
    with pytest.raises(TestbedError) as err:
        parse_inventory_listing(listing, "lab.yml")
    assert "lab-laptop: impair_egress_interface or impair_ingress_interface: missing" in err.value.evidence
    assert "lab-laptop: impair_peer_ip: not an IP address ('not-an-ip')" in err.value.evidence


def test_router_targets_are_the_hosts_own_interfaces() -> None:
    lab = parse_inventory_listing(LISTING, "lab.yml")
    assert lab.publisher == ["esp32-1"]  # found through a child group
    targets = targets_for_router(lab)
    assert [(t.host, t.netns_path, t.interface, t.hook.value, str(t.peer_ip)) for t in targets] == [
        ("lab-laptop", None, "eth0", "egress", "192.168.50.10"),
        ("lab-laptop", None, "wlan0", "ingress", "192.168.50.10"),
    ]
    assert enter_argv(targets[0]) == []


def test_example_inventory_parses_with_ansible_inventory() -> None:
    lab = load_inventory(REPO / "playbooks" / "inventory.example.yml")
    assert lab.broker and lab.router and lab.publisher
    assert targets_for_router(lab)


def test_missing_inventory_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="inventory file not found"):
        load_inventory(tmp_path / "none.yml")


@pytest.mark.parametrize("playbook", ["impair.yml", "clear.yml", "show.yml", "deploy.yml"])
def test_playbooks_pass_ansible_syntax_check(playbook: str) -> None:
    tool = Path(sys.executable).parent / "ansible-playbook"
    argv = [str(tool) if tool.exists() else (shutil.which("ansible-playbook") or "ansible-playbook"),
            "--syntax-check", "-i", str(REPO / "playbooks" / "inventory.example.yml"),
            str(REPO / "playbooks" / playbook)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
