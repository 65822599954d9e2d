"""A fleet dealt over three publisher hosts (issue 40's acceptance; docs/multi-host.md "A fleet over several publisher
hosts"): tests/integration/labhosts.py's lab with testbed-host-pub, -pub2 and -pub3 beside the broker host and the
router, the CLI run as our users run it (an unprivileged docker-group user).

`testbed run --inventory lab.yml --scenario tls --devices 300 --connect-rate 100 --connection resume-ticket
--per-connection 5 --samples 20 --interval 1s` with TESTBED_LAB_FLEET_FULL=1 (the issue's size: 136 s here); in CI
60 devices, 10 readings each 500 ms apart (2 connections each): every device's readings delivered; the device names
f0000.. each exactly once; the ClientHellos from each host's address on the capture (tshark, not our logs) equal its
devices x connections; the start spread (each host's first SYN against when its first device was due) at most the
sum of the hosts' clock bounds plus fleetstart.START_TOLERANCE_US (5 ms: a device's thread wake-up and connect()
on a loaded 2-core host; measured at full size: offsets 668 to 888 us, a spread of 220 us, bounds 35 to 45 us);
nothing of ours left on any host.

testbed-host-pub3's wall clock is wrong all along, for every process of ours there (libfaketime,
tests/integration/fakeclock.py: 350 ms ahead, running 40 ppm fast, the monotonic clock left alone): from the same cell,
the bundle's estimate of that host's offset (before and after) and drift agrees with the injected truth within its
bounds, the bound is at most 1 ms, at least 99 % of the host's mapped send times lie within the bound of their
mapping (analysis/clock.py ClockEstimate.to_lab) of the truth, its uplink is as small as the others' (its fleet's
stamps were faked too: mapped with the probe's estimate they fall where the capture saw them), and the other
hosts' offsets and drifts are zero within their bounds.

A publisher host lost mid-cell is a case of the fault suite (tests/faults, lab-fleet-host-lost).

Then (part 3) a share too big for a host: testbed-host-pub3's open-file limit lowered to 64 (what `docker run --ulimit
nofile=64:64` gives, applied to its sshd, whose sessions run every command Ansible sends) and its memory to 96 MiB
(`docker update --memory 96m`): the cell is refused naming the host, each limit and the hint, before any process of
ours started on any host.

Needs testbed-labhost:latest with a fleet that takes --share-weights/--share-index/--start-at-us.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis.fleetstart import START_TOLERANCE_US
from orchestrator.analysis.logs import DEVICE_FILE
from orchestrator.clients.capacity import needs as capacity_needs
from orchestrator.model import shares

from .docker_user import DockerUser
from .labhosts import EDGE, Lab, leftovers, open_lab, require_image
from .test_lab_run import UserLab, _user_copy, ours_on_hosts

FULL = os.environ.get("TESTBED_LAB_FLEET_FULL") == "1"
DEVICES, RATE, SAMPLES, INTERVAL, PER_CONNECTION = (300, 100, 20, "1s", 5) if FULL else (60, 100, 10, "500ms", 5)
CONNECTIONS = SAMPLES // PER_CONNECTION  # per device: a full handshake, then resumed ones
PUBLISHERS = ("publisher", "publisher2", "publisher3")
WRONG, WRONG_CLOCK = "publisher3", "+0.35 x1.00004"  # 350 ms ahead, 40 ppm fast (fakeclock.py)
SMALL_SHARE = 3000  # the share refused on testbed-host-pub3


@pytest.fixture(scope="module")
def fleet_lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
              docker_user: DockerUser) -> Iterator[UserLab]:
    require_image(request.config)
    with open_lab(tmp_path_factory.mktemp("labfleet"), publishers=len(PUBLISHERS),
                  faketime={WRONG: WRONG_CLOCK}) as lab:
        inventory = _user_copy(lab, docker_user)
        try:
            yield UserLab(lab, docker_user, inventory, docker_user.mkdir(docker_user.work / "lab-fleet"))
        finally:
            for sock in (inventory.parent / "cp").glob("*"):
                docker_user.run(["ssh", "-F", "/dev/null", "-o", f"ControlPath={sock}", "-O", "exit", "lab"],
                                timeout=10)
    assert leftovers() == []


def tshark_fields(capture: Path, display_filter: str, *fields: str) -> list[list[str]]:
    argv = ["tshark", "-r", str(capture), "-d", "tcp.port==8883,tls", "-Y", display_filter, "-T", "fields",
            *(a for f in fields for a in ("-e", f))]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300).stdout
    return [line.split("\t") for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def fleet3(fleet_lab: UserLab) -> tuple[Path, float]:
    """The cell over the three hosts (one run for the tests that read it): its run folder and its wall time."""
    started = time.monotonic()
    proc = fleet_lab.user.testbed(
        "run", "--inventory", str(fleet_lab.inventory), "--scenario", "tls", "--devices", str(DEVICES),
        "--connect-rate", str(RATE), "--connection", "resume-ticket", "--per-connection", str(PER_CONNECTION),
        "--samples", str(SAMPLES), "--interval", INTERVAL, "--out", str(fleet_lab.out / "fleet3"), timeout=900)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return fleet_lab.out / "fleet3", took


def test_a_fleet_dealt_over_three_hosts_starts_as_one_and_merges_into_one_bundle(fleet_lab: UserLab,
                                                                                  fleet3: tuple[Path, float]) -> None:
    lab: Lab = fleet_lab.lab
    run, took = fleet3
    assert ours_on_hosts(lab, ("broker", "router", *PUBLISHERS)) == []
    cell, metrics = json.loads((run / "cell.json").read_text()), json.loads((run / "metrics.json").read_text())
    assert cell["status"] == "ok", cell["error"]
    pubs = {role: lab.hosts[role] for role in PUBLISHERS}
    # every device's readings delivered, the names 0..299 each exactly once
    devices = pd.read_csv(run / "devices.csv", dtype={"device": str, "host": str})
    assert sorted(devices["device"]) == [f"f{i:04d}" for i in range(DEVICES)]
    assert (devices["received"] == SAMPLES).all() and metrics["fleet"]["messages"]["lost"] == 0
    dealt = shares.deal(DEVICES, [1] * len(PUBLISHERS))
    want = {pubs[PUBLISHERS[k]].name: dealt.count(k) for k in range(len(PUBLISHERS))}
    assert devices.groupby("host").size().to_dict() == want
    assert {h: f["devices"] for h, f in metrics["fleet"]["hosts"].items()} == want
    # the ClientHellos from each host's address on the capture: its devices x connections
    hellos = tshark_fields(run / "capture" / "capture.pcapng",
                           "tls.handshake.type == 1 && !tcp.analysis.retransmission", "ip.src")
    by_ip = collections.Counter(row[0] for row in hellos)
    assert {h.addresses[EDGE]: by_ip[h.addresses[EDGE]] for h in pubs.values()} == {
        h.addresses[EDGE]: want[h.name] * CONNECTIONS for h in pubs.values()}
    # the start: each host's first SYN (tshark) against when its first device was due on the common timeline (the
    # start on the broker host's clock plus the host's first send after its own start, on its own clock)
    start = metrics["fleet"]["start"]
    syns = tshark_fields(run / "capture" / "capture.pcapng", "tcp.flags.syn == 1 && tcp.flags.ack == 0",
                         "frame.time_epoch", "ip.src")
    first = {ip: min(float(t) for t, src in syns if src == ip) * 1e6 for ip in {src for _t, src in syns}}
    plan = json.loads((run / "logs" / "fleet_start.json").read_text())
    offsets = {}
    for host in pubs.values():
        own = min(int(pd.read_csv(p, nrows=1)["t_intended_us"][0])
                  for p in (run / "logs" / "hosts" / host.name / "fleet").glob("f*.csv"))
        due = plan["broker_us"] + own - plan["hosts"][host.name]["start_at_us"]
        offsets[host.name] = first[host.addresses[EDGE]] - due
        assert offsets[host.name] == pytest.approx(start["hosts"][host.name]["start_offset_us"], abs=1)
    bounds = {h: metrics["fleet"]["hosts"][h]["clock"]["bound_us"] for h in want}
    spread = max(offsets.values()) - min(offsets.values())
    assert spread <= sum(bounds.values()) + START_TOLERANCE_US, (offsets, bounds)
    assert start["within"] is True and sorted(p.name for p in (run / "logs" / "hosts").iterdir()) == sorted(
        [lab.hosts["broker"].name, *want])
    print(f"fleet over 3 hosts: {took:.1f} s; start offsets us {json.dumps(offsets)}; spread {spread:.0f} us; "
          f"bounds us {json.dumps(bounds)}; ClientHellos {dict(by_ip)}; timings {cell['timings']}")


def mapped_send_times(run: Path, host: str) -> list[tuple[int, int]]:
    """(the host's own t_send_us, the bundle's mapped one) of every message the host's fleet logged."""
    pairs: list[tuple[int, int]] = []
    for own in sorted((run / "logs" / "hosts" / host / "fleet").glob("f*.csv")):
        if DEVICE_FILE.fullmatch(own.stem):
            a, b = pd.read_csv(own), pd.read_csv(run / "logs" / "fleet" / own.name)
            assert list(a["seq"]) == list(b["seq"]), own.name
            pairs += zip(a["t_send_us"].astype("int64"), b["t_send_us"].astype("int64"), strict=True)
    return pairs


def test_a_host_whose_clock_is_wrong_is_estimated_and_mapped_within_its_bound(fleet_lab: UserLab,
                                                                              fleet3: tuple[Path, float]) -> None:
    lab: Lab = fleet_lab.lab
    run, _took = fleet3
    fake, wrong = lab.clocks[WRONG], lab.hosts[WRONG].name
    records = json.loads((run / "logs" / "host_clock.json").read_text())["hosts"]
    hosts = json.loads((run / "metrics.json").read_text())["fleet"]["hosts"]
    est = records[wrong]
    pre, post = est["pre"], est["post"]
    truth = {p["phase"]: fake.lab_minus_host_us(p["at_board_us"]) for p in (pre, post)}
    truth_drift = (truth["post"] - truth["pre"]) / (post["at_board_us"] - pre["at_board_us"]) * 1e6
    said = (f"{wrong}: estimate pre {pre['offset_us']:.1f} +-{pre['bound_us']:.1f} us, post {post['offset_us']:.1f} "
            f"+-{post['bound_us']:.1f} us, drift {est['drift_ppm']:.2f} +-{est['drift_bound_ppm']:.2f} ppm; "
            f"truth {truth['pre']:.1f}, {truth['post']:.1f} us, {truth_drift:.2f} ppm")
    assert abs(pre["offset_us"] - truth["pre"]) <= pre["bound_us"], said
    assert abs(post["offset_us"] - truth["post"]) <= post["bound_us"], said
    assert abs(est["drift_ppm"] - truth_drift) <= est["drift_bound_ppm"], said
    assert est["bound_us"] <= 1000 and hosts[wrong]["clock"]["bound_us"] == est["bound_us"], said
    assert (hosts[wrong]["clock"]["offset_us"], hosts[wrong]["clock"]["drift_ppm"]) == (pre["offset_us"],
                                                                                         est["drift_ppm"])
    # each mapped send time against the truth, within the bound of its mapping (analysis/clock.py to_lab: the
    # anchors' bounds interpolated); the mapped times are whole microseconds (lab/collect.py map_times)
    pairs = mapped_send_times(run, wrong)
    span = post["at_board_us"] - pre["at_board_us"]
    errors = []
    for own, mapped in pairs:
        w = (own - pre["at_board_us"]) / span
        errors.append((abs(mapped - fake.real_us(own)), abs(1 - w) * pre["bound_us"] + abs(w) * post["bound_us"]))
    within = sum(1 for err, bound in errors if err <= bound + 0.5) / len(errors)
    assert len(pairs) == hosts[wrong]["messages"]["sent"] and within >= 0.99, (within, said)
    # its fleet stamped with the wrong clock too: mapped, its messages reach the broker when the others' do
    uplinks = {h: hosts[h]["uplink_median_ms"] for h in hosts}
    assert all(0 < u < 50 for u in uplinks.values()), uplinks
    # and the analysis' own check of each host's mapped send times against the capture (analysis/fleetstart.py)
    assert {h: hosts[h]["clock"]["send_times"]["within_bound"] for h in hosts} == dict.fromkeys(hosts, True), hosts
    # the other hosts: the same kernel clock as the broker host's, so offset and drift zero within their bounds
    for role in PUBLISHERS:
        if role != WRONG:
            other = records[lab.hosts[role].name]
            assert abs(other["pre"]["offset_us"]) <= other["pre"]["bound_us"], other
            assert abs(other["post"]["offset_us"]) <= other["post"]["bound_us"], other
            assert abs(other["drift_ppm"]) <= other["drift_bound_ppm"], other
    print(f"{said}; {within * 100:.2f} % of {len(pairs)} mapped send times within their bound (largest error "
          f"{max(e for e, _b in errors):.1f} us); uplink medians ms {json.dumps(uplinks)}")


def test_a_share_too_big_for_a_host_is_refused_before_anything_starts_anywhere(fleet_lab: UserLab) -> None:
    """Last in this module: the lowered limit cannot be raised again (no CAP_SYS_RESOURCE in the hosts)."""
    lab = fleet_lab.lab
    small = lab.hosts["publisher3"]
    # what `docker run --ulimit nofile=64:64` gives: every sshd of the host, and so every command Ansible runs
    # there from now on (its master connection's too), holds at most 64 descriptors
    lowered = subprocess.run(["docker", "exec", small.name, "sh", "-c",
                              "for p in $(pgrep -x sshd); do prlimit --pid $p --nofile=64:64 || exit 1; done"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert lowered.returncode == 0, lowered.stderr
    # and what `docker run --memory 96m` gives: a memory cgroup of 96 MiB, less than a share of 3000 plain devices
    # holds resident (orchestrator/clients/capacity.py FLEET_MEMORY); MemAvailable there is this machine's
    limited = subprocess.run(["docker", "update", "--memory", "96m", "--memory-swap", "96m", small.name],
                             capture_output=True, text=True, timeout=60, check=False)
    assert limited.returncode == 0, limited.stderr
    started = time.monotonic()
    proc = fleet_lab.user.testbed(
        "run", "--inventory", str(fleet_lab.inventory), "--scenario", "plain", "--devices", str(3 * SMALL_SHARE),
        "--connect-rate", "300", "--samples", "2", "--interval", "100ms", "--out", str(fleet_lab.out / "toobig"))
    took = time.monotonic() - started
    assert proc.returncode != 0, proc.stdout[-2000:]
    run = fleet_lab.out / "toobig"
    cell = json.loads((run / "cell.json").read_text())
    want = (f"{small.name}: its share of {SMALL_SHARE} devices needs 1019 open files per fleet process; RLIMIT_NOFILE "
            "(hard) is 64: raise it")  # 9000 devices over three hosts: three worker processes of 1000 on each
    assert cell["status"] != "ok" and want in cell["error"], cell["error"]
    memory = (f"{small.name}: its share of {SMALL_SHARE} devices needs {capacity_needs(SMALL_SHARE)['resident_kb']} kB "
              f"of memory ({SMALL_SHARE} plain devices x ")
    assert memory in cell["error"] and f"its memory cgroup (limit {96 << 10} kB) has " in cell["error"], cell["error"]
    # nothing of ours ran: no process was started (labhost writes NAME.rc/.log for each) on any host
    started_procs = [f"{h.name}/{p.name}" for h in (run / "logs" / "hosts").iterdir() for p in h.iterdir()
                     if p.suffix in (".rc", ".log")]
    assert started_procs == [] and not (run / "capture" / "capture.pcapng").exists()
    assert ours_on_hosts(lab, ("broker", "router", *PUBLISHERS)) == []
    capacity = {h["name"]: h.get("capacity") for h in cell["hosts"] if h["role"] == "publisher"}
    assert capacity[small.name]["nofile_hard"] == "64", capacity
    assert capacity[small.name]["cgroup_memory_limit_kb"] == str(96 << 10), capacity
    print(f"refused before the start in {took:.1f} s: {cell['error']}")
