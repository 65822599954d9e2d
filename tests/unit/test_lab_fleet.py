"""A fleet over several publisher hosts (docs/multi-host.md, "A fleet over several publisher hosts"), the pure parts:
the inventory's hosts and weights, the dealing, each host's command line, one start mapped into every host's
clock, the records merged with a ``host`` column, and each host's clock and start from the capture."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from orchestrator.analysis import clock, fleethosts, fleetstart
from orchestrator.backends.impairment.targets import parse_inventory_listing
from orchestrator.backends.multihost import LAB_GROUPS, roles_of
from orchestrator.clients import capacity, clock_probe
from orchestrator.errors import TestbedError
from orchestrator.lab import collect, remote, start
from orchestrator.lab.topology import prepare_run_dir
from orchestrator.model import shares
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.virtual import publisher_args


def listing(weights: dict[str, Any] | None = None) -> dict[str, Any]:
    hv: dict[str, Any] = {"b1": {"ansible_host": "10.0.2.10", "testbed_broker_runtime": "native"},
                          "p1": {"ansible_host": "10.0.1.11"}, "p2": {"ansible_host": "10.0.1.12"},
                          "p3": {"ansible_host": "10.0.1.13", "testbed_remote_dir": "/srv/tb"},
                          "esp": {"publisher_kind": "esp32"}}
    for host, w in (weights or {}).items():
        hv[host]["publisher_weight"] = w
    return {"broker": {"hosts": ["b1"]}, "publisher": {"hosts": ["p1", "p2", "esp", "p3"]}, "router": {"hosts": []},
            "_meta": {"hostvars": hv}}


def lab(weights: dict[str, Any] | None = None):  # noqa: ANN201 - LabRoles
    return roles_of(parse_inventory_listing(listing(weights), "lab.yml", LAB_GROUPS))


def test_equal_weights_deal_i_mod_k_and_weights_interleave() -> None:
    assert shares.deal(7, [1, 1, 1]) == [0, 1, 2, 0, 1, 2, 0]
    assert shares.deal(6, [2, 1]) == [0, 1, 0, 0, 1, 0]
    assert shares.share_sizes(300, [1, 1, 1]) == [100, 100, 100]
    assert shares.share_sizes(300, [3, 1, 2]) == [150, 50, 100]
    assert [shares.share_of(i, [3, 1, 2]) for i in range(6)] == shares.deal(6, [3, 1, 2])
    for bad in ([1, 0], [101], []):
        with pytest.raises(ValueError):
            shares.deal(3, bad)


def test_an_inventory_may_list_several_virtual_publisher_hosts_with_weights() -> None:
    roles = lab({"p2": 3})
    assert [h.name for h in roles.publishers] == ["p1", "p2", "p3"] and roles.weights == [1, 3, 1]
    assert roles.publisher.name == "p1" and roles.boards == ["esp"]
    assert [h.name for h in roles.contacted] == ["b1", "p1", "p2", "p3"]
    assert roles.publishers[2].lab_dir == "/srv/tb/lab"
    one = roles.for_cell(fleet=False)  # a single device runs on the first publisher host only
    assert [h.name for h in one.contacted] == ["b1", "p1"] and one.weights == [1]
    assert roles.for_cell(fleet=True) is roles


@pytest.mark.parametrize("bad", [0, -2, 101, "many", 1.5, True])
def test_a_weight_that_is_not_a_positive_integer_is_refused_naming_the_host(bad: Any) -> None:
    with pytest.raises(TestbedError) as err:
        lab({"p3": bad})
    assert f"p3: publisher_weight: must be a whole number 1..100, its share of a fleet (got {bad!r})" in \
        (err.value.evidence or "").splitlines()


def _cell(tmp_path: Path, **spec: Any) -> tuple[Any, ...]:
    roles = lab({"p2": 2})
    sc = load_scenario("tls")
    lay, pki = prepare_run_dir(tmp_path / "run", sc)
    run = RunSpec(scenario="tls", samples=20, interval_ms=1000, inventory="lab.yml", **spec)
    return roles, sc, lay, pki, run


def test_each_publisher_host_runs_its_share_with_its_own_paths(tmp_path: Path) -> None:
    roles, sc, lay, pki, spec = _cell(tmp_path, devices=300, connect_rate=100)
    argv = publisher_args(sc, lay, pki, spec, host=roles.broker_address)
    staged = remote.stage(lay, sc, spec, roles, pki, [lay.fleet_dir])
    assert sorted(staged) == ["b1", "p1", "p2", "p3"]
    v = remote.cell_vars(sc, lay, pki, spec, roles, staged, tmp_path, device_argv=argv, dealt=True)["testbed_lab"]
    assert v["publishers"] == ["p1", "p2", "p3"] and set(v["fetch"]) == {"b1", "p1", "p2", "p3"}
    for k, host in enumerate(["p1", "p2", "p3"]):
        mine = v["publisher_argv"][host]
        assert mine[-4:] == ["--share-weights", "1,2,1", "--share-index", str(k)]
        assert mine[mine.index("--out-dir") + 1] == f"{roles.publishers[k].lab_dir}/run/logs/fleet"
        assert v["probe"][host][-6:] == ["--host", "10.0.2.10", "--port", "9123", "--count", str(remote.PROBE_COUNT)]
    single = RunSpec(scenario="tls", samples=20, interval_ms=1000, inventory="lab.yml")
    one = roles.for_cell(False)
    v1 = remote.cell_vars(sc, lay, pki, single, one, remote.stage(lay, sc, single, one, pki), tmp_path,
                          device_argv=publisher_args(sc, lay, pki, single, host=roles.broker_address))["testbed_lab"]
    assert list(v1["publisher_argv"]) == ["p1"] and "--share-index" not in v1["publisher_argv"]["p1"]
    assert v1["every_host"] == ["b1", "p1"]


def _exchanges(offset_us: int, start_us: int, n: int = 8, rtt_us: int = 200) -> str:
    rows = ["t1_us,t2_us,t3_us,t4_us"]
    for k in range(n):
        t1 = start_us + k * 10_000
        rows.append(f"{t1},{t1 + offset_us + rtt_us // 2},{t1 + offset_us + rtt_us // 2 + 20},{t1 + rtt_us + 20}")
    return "\n".join(rows) + "\n"


def test_one_start_on_the_broker_hosts_clock_is_mapped_into_each_hosts_clock() -> None:
    stamps = {"p1": _exchanges(300_000, 1_000_000_000), "p2": _exchanges(-5_000, 1_000_200_000)}
    labvars = {"testbed_lab": {"publishers": ["p1", "p2"], "publisher_argv": {"p1": ["fleet"], "p2": ["fleet"]}}}
    outputs = {h: {start.STAMPS_TASK: {"rc": 0, "stdout": text}} for h, text in stamps.items()}
    plan = start.apply_start(outputs, labvars, since_stamps_s=1.5, lead_s=6.0)
    latest_t3 = 1_000_000_000 + 70_000 + 300_000 + 100 + 20  # p1's last exchange, on the broker host's clock
    assert plan.broker_us == latest_t3 + 7_500_000
    assert plan.hosts["p1"].start_at_us == plan.broker_us - 300_000  # host = broker - offset
    assert plan.hosts["p2"].start_at_us == plan.broker_us + 5_000
    assert labvars["testbed_lab"]["publisher_argv"]["p2"] == ["fleet", "--start-at-us", str(plan.broker_us + 5_000)]
    # half the 200-us round trip and the resolution, plus the drift the bound allows over the 7.5 s to the start
    assert plan.hosts["p1"].bound_us == pytest.approx(102 + clock.MAX_DRIFT_PPM * 7.5, abs=40)
    record = start.start_record(plan, devices=4, connect_rate=100, weights=[1, 1], hosts=["p1", "p2"],
                                addresses={"p1": "10.0.1.11", "p2": "10.0.1.12"})
    assert record["first_device"] == {"p1": 0, "p2": 1}
    three = start.start_record(plan, devices=2, connect_rate=100, weights=[1, 1, 1], hosts=["p1", "p2", "p3"],
                               addresses={})
    assert three["first_device"] == {"p1": 0, "p2": 1, "p3": None}  # an empty share
    with pytest.raises(TestbedError, match="p2: no clock estimate before the cell"):
        start.plan_start({"p1": stamps["p1"], "p2": ""}, 0.0, 6.0)


def _archive(path: Path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))


def _host_files(offset_us: int, devices: list[str], slew_us: float = 0.0) -> dict[str, str]:
    summary = {"devices": len(devices), "connected": len(devices), "cpu_user_s": 1.0, "cpu_sys_s": 0.5,
               "max_rss_kb": 1000, "wall_s": 3.0, "steady_lag_us": {"p99": 10 * len(devices)}}
    disc = {"adjtimex": {"available": True, "offset_us": slew_us, "freq_ppm": 0.0}, "daemons": []}
    return {**{f"run/logs/fleet/{d}.csv": "seq,t_send_us,bytes,t_intended_us\n0,1030000000,65,1030000000\n"
               for d in devices},
            "run/logs/fleet/connections.csv": "device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,"
                                              "error\n" + "".join(f"{d},1030000000,1,2,3,1,\n" for d in devices),
            "run/logs/fleet/summary.json": json.dumps(summary), "run/keylogs/fleet.keys": "CLIENT_RANDOM a b\n",
            "procs/publisher.rc": "0\n", "clock/pre.csv": _exchanges(offset_us, 1_000_000_000),
            "clock/post.csv": _exchanges(offset_us, 1_060_000_000),
            "clock/pre_discipline.json": json.dumps(disc), "clock/post_discipline.json": json.dumps(disc)}


def test_every_hosts_records_merge_into_one_run_folder_with_a_host_column(tmp_path: Path) -> None:
    roles = lab()
    lay = Layout(tmp_path / "run")
    lay.logs.mkdir(parents=True)
    lay.keylogs.mkdir(parents=True)
    _archive(tmp_path / "p1.tgz", _host_files(-700, ["f0000", "f0003"]))
    _archive(tmp_path / "p2.tgz", _host_files(2_000, ["f0001"], slew_us=150.0))
    clocks = collect.collect_publishers(tmp_path, lay, roles)  # p3's archive never came back
    assert clocks["p3"] is None and clocks["p1"]["available"] and clocks["p2"]["discipline"]["slewing"]
    assert not clocks["p1"]["discipline"]["slewing"]
    assert (lay.fleet_dir / "f0000.csv").read_text().endswith("0,1029999300,65,1029999300\n")  # p1's clock mapped
    assert (lay.fleet_dir / "f0001.csv").read_text().endswith("0,1030002000,65,1030002000\n")
    assert (lay.host_logs("p2") / "fleet" / "f0001.csv").read_text().endswith("0,1030000000,65,1030000000\n")
    conns = pd.read_csv(lay.fleet_dir / "connections.csv", dtype=str)
    assert list(conns["host"]) == ["p1", "p1", "p2"] and list(conns.columns)[-1] == "host"
    assert lay.fleet_hosts.read_text() == "device,host\nf0000,p1\nf0001,p2\nf0003,p1\n"
    summary = json.loads((lay.fleet_dir / "summary.json").read_text())
    assert (summary["devices"], summary["cpu_user_s"], summary["steady_lag_us"]) == (3, 2.0, {"p99": 20})
    assert sorted(summary["hosts"]) == ["p1", "p2"]
    assert sorted(p.name for p in lay.keylogs.iterdir()) == ["fleet.p1.keys", "fleet.p2.keys"]
    host_clock = json.loads(lay.host_clock.read_text())
    assert host_clock["available"] is False and "p3" in host_clock["reason"]  # the worst host decides
    assert sorted(host_clock["hosts"]) == ["p1", "p2", "p3"]


def test_the_tables_and_the_fleet_block_get_each_hosts_figures() -> None:
    hosts = {"f0000": "p1", "f0001": "p2"}
    pm = pd.DataFrame({"device": ["f0000", "f0000", "f0001"], "seq": [0, 1, 0], "recv_count": [1, 0, 1],
                       "broker_in_us": [1.0, None, 1.0], "broker_out_us": [1.0, None, 1.0],
                       "uplink_ms": [0.5, None, 4.0]})
    send = pd.DataFrame({"device": ["f0000", "f0000", "f0001"], "seq": [0, 1, 0]})
    assert list(fleethosts.with_hosts(pm, hosts)["host"]) == ["p1", "p1", "p2"]
    block = fleethosts.hosts_block(pm, send, hosts, samples=2)
    assert block["p1"]["messages"] == {"expected": 2, "sent": 2, "delivered": 1, "lost": 1, "devices_with_loss": 1}
    assert block["p2"]["devices"] == 1 and block["p2"]["uplink_median_ms"] == 4.0
    assert block["p2"]["uplink_p01_ms"] == 4.0 and block["p1"]["uplink_p01_ms"] == 0.5


def test_a_hosts_mapped_send_times_are_judged_against_the_capture_within_its_bound() -> None:
    """A message is captured after it was sent: mapped send times within the bound of the truth are at most the
    bound after their capture. A host whose estimate is off (p2: 2 % of its messages 300 us "before" their send,
    against an 80-us bound) is named; p1 has one such message in 100: 99 % are within."""
    uplink = {"p1": [-0.3] + [0.3] * 99, "p2": [-0.3] * 2 + [0.3] * 98}
    pm = pd.DataFrame({"device": [d for d, h in (("f0000", "p1"), ("f0001", "p2")) for _ in uplink[h]],
                       "seq": [*range(100), *range(100)], "recv_count": 1, "broker_in_us": 1.0,
                       "broker_out_us": 1.0, "uplink_ms": uplink["p1"] + uplink["p2"]})
    hosts = {"f0000": "p1", "f0001": "p2"}
    metrics: dict[str, Any] = {"fleet": {"hosts": fleethosts.hosts_block(pm, pm[["device", "seq"]], hosts, 100)}}
    found = fleetstart.add_fleet_hosts(metrics, pd.DataFrame(), {"hosts": {"p1": _clock(0, 80.0),
                                                                           "p2": _clock(-1, 80.0)}}, None)
    p1, p2 = (metrics["fleet"]["hosts"][h]["clock"]["send_times"] for h in ("p1", "p2"))
    assert p1["within_bound"] is True and p1["uplink_p01_ms"] == pytest.approx(0.3)
    assert p2["within_bound"] is False and p2["uplink_p01_ms"] == pytest.approx(-0.3)
    assert [w for w in found if "send times" in w] == [
        "p2: more than 1 % of its send times, mapped to the broker host's clock, fall after their capture by more "
        "than its clock bound (80 us; uplink 1st percentile -0.300 ms): its clock estimate does not hold for its "
        "messages (a clock stepped or slewed during the cell?)"]
    assert fleetstart.send_times_block(80.0, None)["within_bound"] is None


def _clock(offset: float, bound: float) -> dict[str, Any]:
    return {"available": True, "pre": {"offset_us": offset}, "post": {"offset_us": offset + 3}, "drift_ppm": 0.05,
            "bound_us": bound, "discipline": {"slewing": offset > 0, "daemons": []}}


def test_each_hosts_clock_and_start_offset_come_from_the_capture() -> None:
    t0 = 1_700_000_000_000_000
    packets = pd.DataFrame({"ip_src": ["10.0.1.11", "10.0.1.12", "10.0.1.11", "10.0.2.10"],
                            "tcp_flags": [0x02, 0x02, 0x02, 0x12], "leg": ["publisher->broker"] * 4,
                            "time": [(t0 + 400) / 1e6, (t0 + 10_000 + 900) / 1e6, (t0 + 20_000) / 1e6, t0 / 1e6]})
    assert fleetstart.first_syns(packets) == pytest.approx({"10.0.1.11": t0 + 400, "10.0.1.12": t0 + 10_900})
    metrics: dict[str, Any] = {"fleet": {"hosts": {"p1": {"uplink_median_ms": 4.0},
                                                   "p2": {"uplink_median_ms": 0.2}}}}
    host_clock = {"hosts": {"p1": _clock(300_000, 80.0), "p2": _clock(-5_000, 120.0)}}
    plan = {"broker_us": t0, "connect_rate": 100.0, "first_device": {"p1": 0, "p2": 1},
            "addresses": {"p1": "10.0.1.11", "p2": "10.0.1.12"}}
    found = fleetstart.add_fleet_hosts(metrics, packets, host_clock, plan)
    block = metrics["fleet"]
    assert block["hosts"]["p1"]["start_offset_us"] == 400 and block["hosts"]["p2"]["start_offset_us"] == 900
    assert block["start"]["spread_us"] == 500 and block["start"]["hosts_bound_sum_us"] == 200
    assert block["start"]["within"] is True  # 500 us <= 200 us + the 5-ms tolerance
    assert block["hosts"]["p1"]["clock"]["one_way_delay"]["available"] is True  # 80 us against 4 ms
    assert block["hosts"]["p2"]["clock"]["one_way_delay"]["available"] is False  # 120 us against 0.2 ms
    assert any(w.startswith("p2: one-way delay withheld: clock bound") for w in found)
    assert any(w.startswith("p1: its clock was slewed during the cell") for w in found)
    late = fleetstart.start_block(plan, {"10.0.1.11": t0 + 400, "10.0.1.12": t0 + 40_000}, {"p1": 80, "p2": 120})
    assert late["within"] is False
    assert "latest to start: p2" in fleetstart.start_warnings({"start": late})[0]
    # a device connects at its slot plus its seeded offset: the host's first send after its own start, its clock
    plan["hosts"] = {"p1": {"start_at_us": 5_000_000}, "p2": {"start_at_us": 7_000_000}}
    due = fleetstart.start_block(plan, {"10.0.1.11": t0 + 250_400, "10.0.1.12": t0 + 10_900},
                                 {"p1": 80, "p2": 120}, {"p1": 5_250_000, "p2": None})
    assert due["hosts"]["p1"]["due_us"] == t0 + 250_000 and due["hosts"]["p1"]["start_offset_us"] == 400
    assert due["hosts"]["p2"]["start_offset_us"] == 900  # no logs of its own: its first device's slot


def test_a_hosts_first_send_is_read_from_its_own_logs(tmp_path: Path) -> None:
    (tmp_path / "f0000.csv").write_text("seq,t_send_us,bytes,t_intended_us\n0,1500,65,1400\n1,2500,65,2400\n")
    (tmp_path / "f0003.csv").write_text("seq,t_send_us,bytes,t_intended_us\n0,1300,65,1200\n")
    (tmp_path / "f0006.csv").write_text("seq,t_send_us,bytes,t_intended_us\n")
    assert fleetstart.first_due(tmp_path) == 1200 and fleetstart.first_due(tmp_path / "none") is None


def test_the_probe_records_the_hosts_time_discipline() -> None:
    got = clock_probe.discipline()
    assert set(got) == {"adjtimex", "daemons"}
    kernel = got["adjtimex"]
    assert isinstance(kernel, dict) and kernel["available"] is True  # modes 0: read-only, no privilege needed
    assert {"state", "status", "offset_us", "freq_ppm", "pll", "unsynchronised"} <= set(kernel)


def test_a_share_the_host_cannot_carry_is_refused_naming_the_host_the_limit_and_the_hint(tmp_path: Path) -> None:
    assert {k: capacity.needs(100)[k] for k in ("nofile", "nproc", "ports")} == {"nofile": 119, "nproc": 164,
                                                                                   "ports": 100}
    assert capacity.needs(2000)["nofile"] == 1000 + 19  # two worker processes of 1000 devices each
    roomy = {"cores": 2, "mem_available_kb": 10**6, "nofile_hard": 1 << 20, "nproc_hard": 1 << 20, "uid": 1000,
             "ephemeral_ports": 28232}
    assert capacity.problems("p3", 100, roomy) == []
    [nofile] = capacity.problems("p3", 100, {**roomy, "nofile_hard": 64})
    assert nofile.startswith("p3: its share of 100 devices needs 119 open files per fleet process; RLIMIT_NOFILE "
                             "(hard) is 64: raise it") and "publisher_weight" in nofile
    assert capacity.problems("p3", 100, {**roomy, "nproc_hard": 50, "uid": 0}) == []  # root: not enforced
    assert len(capacity.problems("p3", 100, {**roomy, "nproc_hard": 50, "ephemeral_ports": 10})) == 2
    here = capacity.host_limits()
    assert here["cores"] and here["ephemeral_ports"] and here["nofile_hard"] != 0
    roles, sc, lay, pki, spec = _cell(tmp_path, devices=300, connect_rate=100)
    v = remote.cell_vars(sc, lay, pki, spec, roles, {}, tmp_path,
                         device_argv=publisher_args(sc, lay, pki, spec, host=roles.broker_address),
                         dealt=True)["testbed_lab"]
    assert {h: argv[-6:] for h, argv in v["capacity"].items()} == {  # weights 1,2,1; a TLS share's memory
        h: ["--host", h, "--devices", str(n), "--transport", "tls"] for h, n in (("p1", 75), ("p2", 150), ("p3", 75))}


def test_a_share_above_the_per_host_limit_is_refused_by_the_controller_before_the_play(tmp_path: Path) -> None:
    roles, _sc, _lay, _pki, _spec = _cell(tmp_path, devices=300, connect_rate=100)  # weights 1,2,1
    spec = RunSpec(scenario="tls", samples=2, interval_ms=1000, devices=30_000, inventory="lab.yml")
    with pytest.raises(TestbedError) as err:
        remote.host_devices(spec, roles, dealt=True)
    assert str(err.value) == ("--devices 30000: a share above the per-host limit of 10000 devices (p2 15000)")
    assert "publisher_weight" in (err.value.hint or "")
    assert remote.host_devices(spec.model_copy(update={"devices": 20_000}), roles, dealt=True) == {
        "p1": 5000, "p2": 10000, "p3": 5000}


def test_the_lab_preflight_refuses_that_share_before_any_host_is_contacted() -> None:
    from orchestrator.measure.multihost import lab_preflight  # measure/ is above lab/: only this test needs it
    from orchestrator.publishers.variants import variant_for

    example = Path(__file__).resolve().parents[2] / "playbooks" / "inventory.lab.example.yml"  # one publisher host
    spec = RunSpec(scenario="tls", samples=2, interval_ms=1000, devices=10_001, inventory=str(example))
    with pytest.raises(TestbedError, match=r"^--devices 10001: a share above the per-host limit of 10000 devices "
                                           r"\(pi-publisher 10001\)$"):
        lab_preflight(spec, example, variant_for(spec))
    assert lab_preflight(spec.model_copy(update={"devices": 10_000}), example, variant_for(spec)).is_noop
