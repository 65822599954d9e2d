"""A fleet across hosts, the fleet program's side (issue 40, parts 1, 2 and 4): each publisher host runs its share
(--share-weights, --share-index; fleet_share.cpp, the same dealing as orchestrator/model/shares.py), the ids are as
wide as the fleet needs, a share above the per-host limit is refused, and every host starts on one instant
(--start-at-us).

Two fleet programs on this machine stand for two publisher hosts: against one Mosquitto they deliver together
exactly the whole fleet, each device once, with its global id and its slot on the common timeline.
"""

from __future__ import annotations

import csv
import json
import random
import re
import subprocess
import time
from pathlib import Path

import pytest
from fwtest_support import Broker, HostBuild, Pki
from test_fleet_loader import CHACHA_OPENSSL, Subscriber

from orchestrator.model import shares
from orchestrator.model.axes import MAX_DEVICES_PER_HOST
from orchestrator.model.rules import fleet_device_id, payload_min_size

TOPIC = "testbed/fleet"


def _fleet(build: HostBuild, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(build.build_dir / "fleet"), *argv], capture_output=True, text=True, check=False,
                          timeout=timeout)


def _describe(build: HostBuild, devices: int, weights: list[int], k: int) -> dict[str, object]:
    proc = _fleet(build, "--devices", str(devices), "--share-weights", ",".join(map(str, weights)), "--share-index",
                  str(k), "--describe-share")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    return json.loads(proc.stdout)


def _now_us() -> int:
    return time.time_ns() // 1000


def test_the_program_deals_as_the_model(host_build: HostBuild) -> None:
    """The C++ dealing and the Python twin give every share the same devices, for many fleets and weights."""
    rng = random.Random(4040)
    cases = [(10, [1, 2]), (12, [1, 1, 1]), (7, [3]), (2, [1, 1, 1]), (1000, [5, 3, 2]), (999, [100, 1]),
             (10_001, [1, 1]), (257, [1] * 256)]
    cases += [(rng.randint(1, 3000), [rng.randint(1, 100) for _ in range(rng.randint(1, 5))]) for _ in range(20)]
    for devices, weights in cases:
        got = []
        for k in range(len(weights)) if len(weights) < 5 else (0, len(weights) - 1):
            described = _describe(host_build, devices, weights, k)
            assert described["indices"] == shares.share_devices(devices, weights, k), (devices, weights, k)
            assert described["share_devices"] == len(described["indices"])  # type: ignore[arg-type]
            got += described["indices"]  # type: ignore[operator]
        if len(weights) < 5:
            assert sorted(got) == list(range(devices)), "every device in exactly one share"


@pytest.mark.parametrize("devices,digits,last", [(10_000, 4, "f9999"), (10_001, 5, "f10000"),
                                                 (100_000, 5, "f99999"), (100_001, 6, "f100000")])
def test_ids_are_as_wide_as_the_fleet_needs(host_build: HostBuild, devices: int, digits: int, last: str) -> None:
    described = _describe(host_build, devices, [1], 0)
    assert (described["index_digits"], described["first_id"], described["last_id"]) == (digits, "f" + "0" * digits,
                                                                                          last)
    assert fleet_device_id(devices - 1, devices) == last and fleet_device_id(0, devices) == described["first_id"]


@pytest.mark.parametrize("devices,weights", [(10_000, "1"), (10_001, "1,1")])
def test_the_minimum_payload_follows_the_id_width(host_build: HostBuild, tmp_path: Path, devices: int,
                                                  weights: str) -> None:
    """The program's minimum (payload.cpp, from its longest id) is the model's (rules.py payload_min_size)."""
    minimum = payload_min_size(20, fleet_device_id(devices - 1, devices))
    common = ["--devices", str(devices), "--share-weights", weights, "--samples", "20", "--out-dir", str(tmp_path),
              "--check"]
    assert _fleet(host_build, *common, "--payload", str(minimum)).stdout == "ok\n"
    short = _fleet(host_build, *common, "--payload", str(minimum - 1))
    assert short.returncode == 2
    assert f"below the minimum of {minimum} bytes for device id \"{fleet_device_id(devices - 1, devices)}\"" in \
        short.stderr, short.stderr


def test_a_share_above_the_per_host_limit_is_refused(host_build: HostBuild, tmp_path: Path) -> None:
    out = tmp_path / "o"
    common = ["--payload", "66", "--out-dir", str(out)]
    whole = _fleet(host_build, "--devices", str(MAX_DEVICES_PER_HOST + 1), *common)
    assert (whole.returncode, whole.stderr.strip()) == (2, (
        f"fleet: error InvalidArgument: --devices {MAX_DEVICES_PER_HOST + 1} gives this host "
        f"{MAX_DEVICES_PER_HOST + 1} devices, above the per-host limit of {MAX_DEVICES_PER_HOST} devices: spread the "
        "fleet over more publisher hosts"))
    # 14,000 devices over weights 1,3: share 1 gets 10,500 (refused), share 0 3,500 (fits)
    assert shares.share_sizes(14_000, [1, 3]) == [3500, 10_500]
    big = _fleet(host_build, "--devices", "14000", "--share-weights", "1,3", "--share-index", "1", *common)
    assert (big.returncode, big.stderr.strip()) == (2, (
        f"fleet: error InvalidArgument: --devices 14000 with --share-weights 1,3 gives this host 10500 devices (share "
        f"1), above the per-host limit of {MAX_DEVICES_PER_HOST} devices: spread the fleet over more publisher hosts"))
    small = _fleet(host_build, "--devices", "14000", "--share-weights", "1,3", "--share-index", "0", *common, "--check")
    assert (small.returncode, small.stdout) == (0, "ok\n")
    assert not out.exists(), "refused before anything was written"


def test_a_start_in_the_past_or_far_ahead_is_refused(host_build: HostBuild, tmp_path: Path) -> None:
    out = tmp_path / "o"
    past = _fleet(host_build, "--devices", "3", "--out-dir", str(out), "--start-at-us", str(_now_us() - 1_000_000))
    assert past.returncode == 2 and past.stdout == ""
    assert past.stderr.startswith("fleet: error InvalidArgument: --start-at-us "), past.stderr
    assert " ms past on this host's clock (CLOCK_REALTIME " in past.stderr
    assert past.stderr.rstrip().endswith("at most 50 ms late is started: give a later start"), past.stderr
    ahead = _fleet(host_build, "--devices", "3", "--out-dir", str(out), "--start-at-us", str(_now_us() + 7200 * 10**6))
    assert ahead.returncode == 2 and re.fullmatch(
        r"fleet: error InvalidArgument: --start-at-us \d+ is 7200 s ahead of this host's clock \(CLOCK_REALTIME \d+\); "
        r"at most 3600 s ahead is waited for \(epoch microseconds\)", ahead.stderr.strip()), ahead.stderr
    assert not out.exists(), "refused before anything was written"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _argv(broker: Broker, out: Path, *extra: str) -> list[str]:
    return ["--host", "127.0.0.1", "--port", str(broker.plain_port), "--topic", TOPIC, "--out-dir", str(out), *extra]


def test_two_shares_deliver_the_whole_fleet_once(host_build: HostBuild, pki: Pki, broker_factory,
                                                 tmp_path: Path) -> None:
    """--share-weights 1,2 on two programs, one start: each device of the 30 runs once, on its share's program,
    with its global id, seeds and slot T + i / rate; every message reaches the broker."""
    broker = broker_factory(CHACHA_OPENSSL)
    devices, samples, rate, weights = 30, 4, 100.0, [1, 2]
    subscriber = Subscriber(broker.plain_port)
    start = _now_us() + 1_500_000
    fleet = str(host_build.build_dir / "fleet")
    common = ["--devices", str(devices), "--samples", str(samples), "--interval-ms", "100", "--connect-rate", "100",
              "--seed", "9", "--share-weights", "1,2", "--start-at-us", str(start)]
    try:
        procs = [subprocess.Popen([fleet, *_argv(broker, tmp_path / f"share{k}", *common, "--share-index", str(k))],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (0, 1)]
        outputs = [p.communicate(timeout=60) for p in procs]
        subscriber.wait_for(devices * samples)
        received = subscriber.settle()
    finally:
        subscriber.close()
    for p, (stdout, stderr) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, stdout + stderr
    assert received == devices * samples and subscriber.duplicates == 0
    assert {d for d, _ in subscriber.messages} == {fleet_device_id(i, devices) for i in range(devices)}

    seen: dict[str, int] = {}
    for k in (0, 1):
        out = tmp_path / f"share{k}"
        mine = shares.share_devices(devices, weights, k)
        rows = _rows(out / "connections.csv")
        assert [r["device"] for r in rows] == [fleet_device_id(i, devices) for i in mine], "its share, in index order"
        assert sorted(p.stem for p in out.glob("f*.csv")) == [r["device"] for r in rows], "send logs of its share only"
        for i, r in zip(mine, rows, strict=True):
            assert r["error"] == "" and r["messages"] == str(samples)
            slot = start + int(i * 1e6 / rate)
            assert abs(int(r["t_start_us"]) - slot) < 1000, (r, slot)  # the slot on the common timeline
            log = _rows(out / f"{r['device']}.csv")
            assert [int(x["seq"]) for x in log] == list(range(samples))
            assert int(log[0]["t_send_us"]) >= slot, "nothing sent before its slot"
            for x in log:
                assert subscriber.messages[(r["device"], int(x["seq"]))] == int(x["t_send_us"])
            seen[r["device"]] = seen.get(r["device"], 0) + 1
        summary = json.loads((out / "summary.json").read_text())
        assert summary["share"] == {"index": k, "weights": weights, "devices": len(mine)}
        assert (summary["devices"], summary["fleet_devices"], summary["messages_sent"]) == (
            len(mine), devices, len(mine) * samples)
        assert (summary["start_at_us"], summary["start_at_given"]) == (start, True)
        assert 0 < summary["start_lead_us"] <= 1_500_000
    assert seen == {fleet_device_id(i, devices): 1 for i in range(devices)}, "each device on one host, once"


def test_a_share_keeps_the_whole_fleet_s_seeds(host_build: HostBuild, pki: Pki, broker_factory,
                                               tmp_path: Path) -> None:
    """A device's random start offset is its own (seed, global index): the same whether the fleet runs whole
    or in shares."""
    broker = broker_factory(CHACHA_OPENSSL)
    offsets: dict[str, dict[str, int]] = {}
    for name, extra in (("whole", []), ("share1", ["--share-weights", "2,1", "--share-index", "1"])):
        out = tmp_path / name
        proc = _fleet(host_build, *_argv(broker, out, "--devices", "9", "--samples", "1", "--interval-ms", "200",
                                         "--connect-rate", "1000", "--seed", "42", *extra))
        assert proc.returncode == 0, proc.stderr
        offsets[name] = {r["device"]: int(_rows(out / f"{r['device']}.csv")[0]["t_intended_us"]) - int(r["t_start_us"])
                         for r in _rows(out / "connections.csv")}
    assert list(offsets["share1"]) == [fleet_device_id(i, 9) for i in shares.share_devices(9, [2, 1], 1)]
    assert offsets["share1"] == {d: offsets["whole"][d] for d in offsets["share1"]}


def test_the_fleet_waits_for_its_start(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path) -> None:
    """--start-at-us T: nothing connects before T; device 0's slot is T, as this host's clock reads it."""
    broker = broker_factory(CHACHA_OPENSSL)
    out = tmp_path / "o"
    start = _now_us() + 1_200_000
    began = time.monotonic()
    proc = _fleet(host_build, *_argv(broker, out, "--devices", "2", "--samples", "1", "--interval-ms", "10",
                                     "--connect-rate", "10", "--start-at-us", str(start)))
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    assert f"fleet: device 0's slot at {start} us (this host's clock, --start-at-us, in " in proc.stdout
    rows = _rows(out / "connections.csv")
    assert abs(int(rows[0]["t_start_us"]) - start) < 1000 and abs(int(rows[1]["t_start_us"]) - start - 100_000) < 1000
    assert int(_rows(out / "f0000.csv")[0]["t_send_us"]) >= start
    assert took >= 1.1, f"returned after {took:.2f} s: it did not wait for its start"


def test_a_share_without_devices_runs_none(host_build: HostBuild, tmp_path: Path) -> None:
    """Fewer devices than shares: the last share has none; it connects nowhere, writes its empty logs, exits 0."""
    assert shares.share_sizes(2, [1, 1, 1]) == [1, 1, 0]
    out = tmp_path / "o"
    proc = _fleet(host_build, "--devices", "2", "--share-weights", "1,1,1", "--share-index", "2", "--out-dir", str(out),
                  "--port", "1")
    assert proc.returncode == 0, proc.stderr
    header = "device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error\n"
    assert (out / "connections.csv").read_text() == header, "no device's row"
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["devices"], summary["fleet_devices"], summary["share"], summary["messages_expected"]) == (
        0, 2, {"index": 2, "weights": [1, 1, 1], "devices": 0}, 0)


@pytest.mark.parametrize("weights", ["1," * shares.MAX_SHARES + "1", str(shares.MAX_SHARE_WEIGHT + 1), "1,0", "1,,2",
                                     " 1", "2;3"])
def test_weights_the_model_refuses_the_program_refuses(host_build: HostBuild, weights: str) -> None:
    """The program's bounds on the weights are the model's (shares.MAX_SHARES, MAX_SHARE_WEIGHT)."""
    proc = _fleet(host_build, "--devices", "10", "--share-weights", weights, "--describe-share")
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"fleet: error InvalidArgument: --share-weights: expected 1..{shares.MAX_SHARES} comma-separated whole numbers "
        f"1..{shares.MAX_SHARE_WEIGHT} (one per publisher host), got \"{weights}\""))
    if all(w.isdigit() for w in weights.split(",")):  # a list of numbers out of bounds: the model refuses it too
        with pytest.raises(ValueError, match="share weights: expected"):
            shares.check_weights([int(w) for w in weights.split(",")])
