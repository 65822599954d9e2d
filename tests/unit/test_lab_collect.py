"""What comes back from the lab's hosts (orchestrator/lab/collect.py) and what the analysis adds for a run across
hosts (orchestrator/runanalysis/labanalysis.py): host records, the clock estimate and the mapped send logs, losses
before the capture, the one-way delay verdict; and the nft counter of a router listed once per target."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.backends.impairment.plan import dropped_packets
from orchestrator.backends.impairment.targets import parse_inventory_listing
from orchestrator.backends.multihost import LAB_GROUPS, roles_of
from orchestrator.lab import collect
from orchestrator.model.layout import Layout
from orchestrator.runanalysis.labanalysis import losses_before_capture, with_host_clock

FACTS = """kernel=6.1.0-18-amd64
os=Debian GNU/Linux 12 (bookworm)
python=Python 3.11.2
mosquitto=mosquitto version 2.0.11
dumpcap=Dumpcap (Wireshark) 4.0.17 (Git v4.0.17 packaged as 4.0.17-0+deb12u3).
vdevice=sha256:b0d828752774497c
mbedtls=libmbedtls14 2.28.3-1
tc=tc utility, iproute2-6.1.0, libbpf 1.1.2
docker=
broker stopped, exit 0
"""


def _roles():  # noqa: ANN202 - LabRoles
    return roles_of(parse_inventory_listing({
        "broker": {"hosts": ["b1"]}, "publisher": {"hosts": ["p1"]}, "router": {"hosts": ["r1"]},
        "_meta": {"hostvars": {"b1": {"ansible_host": "10.0.2.10"}, "p1": {"ansible_host": "10.0.1.10"},
                               "r1": {"impair_ingress_interface": "eth1"}}}}, "lab.yml", LAB_GROUPS))


def test_host_facts_are_key_value_lines_and_records_keep_what_runs_there() -> None:
    facts = collect.host_facts(FACTS)
    assert facts["kernel"] == "6.1.0-18-amd64" and "docker" not in facts  # empty values left out
    assert "broker stopped, exit 0" not in facts.values()
    lab = _roles()
    broker = collect.host_record(lab.broker, facts)
    assert broker["versions"] == {"mosquitto": "mosquitto version 2.0.11", "dumpcap": facts["dumpcap"],
                                  "python": "Python 3.11.2"}
    assert broker["clock"]["reference"] is True and broker["address"] == "10.0.2.10"
    pub = collect.host_record(lab.publisher, facts, {"available": False, "reason": "no exchange answered"})
    assert set(pub["versions"]) == {"vdevice", "mbedtls", "python"}
    assert pub["clock"] == {"available": False, "reason": "no exchange answered"}
    router = collect.host_record(lab.routers[0], facts)
    assert set(router["versions"]) == {"tc", "python"} and "clock" not in router


def _exchanges(offset_us: int, start_us: int, n: int = 8, rtt_us: int = 200) -> str:
    """clock_probe.py lines of a host whose clock is ``offset_us`` behind the broker's (broker = host + offset)."""
    rows = ["t1_us,t2_us,t3_us,t4_us"]
    for k in range(n):
        t1 = start_us + k * 10_000
        rows.append(f"{t1},{t1 + offset_us + rtt_us // 2},{t1 + offset_us + rtt_us // 2 + 20},{t1 + rtt_us + 20}")
    return "\n".join(rows) + "\n"


def test_the_estimate_maps_the_publishers_times_to_the_broker_hosts_clock(tmp_path: Path) -> None:
    (tmp_path / "clock_pre.csv").write_text(_exchanges(1500, 1_000_000_000))
    (tmp_path / "clock_post.csv").write_text(_exchanges(1500, 1_060_000_000))
    est, record = collect.host_clock_estimate(tmp_path, "p1", "b1")
    assert est is not None and record["available"] and record["reference"] == "b1"
    assert record["pre"]["offset_us"] == pytest.approx(1500) and record["bound_us"] == pytest.approx(102, abs=1)
    mapped = collect.map_times("seq,t_send_us,bytes\n0,1030000000,65\n1,,65\n", est)
    assert mapped == "seq,t_send_us,bytes\n0,1030001500,65\n1,,65\n"  # bytes untouched, an empty time kept
    _none, missing = collect.host_clock_estimate(tmp_path / "nowhere", "p1", "b1")
    assert missing["available"] is False and "0 valid sample(s)" in missing["reason"]


def _archive(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def test_the_hosts_records_land_under_the_single_host_names(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "run")
    lay.logs.mkdir(parents=True)
    lab = _roles()
    assert collect.collect_broker(tmp_path / "missing.tgz", lay, "b1") is False
    collect.collect_broker(_archive(tmp_path / "b1.tgz", {
        "run/capture/capture.pcapng": "pcap", "run/logs/subscriber.csv": "seq,t_recv_us,bytes,dup,device\n",
        "run/keylogs/subscriber.keys": "CLIENT_RANDOM x y\n", "procs/broker.log": "mosquitto started\n",
        "procs/broker.rc": "0\n", "procs/broker.pid": "42\n", "../outside.txt": "no"}), lay, "b1")
    assert not collect.safe_member("../outside.txt") and not collect.safe_member("/etc/passwd")
    assert lay.capture.read_text() == "pcap" and lay.subscriber_log.exists()
    assert (lay.keylogs / "subscriber.keys").exists()
    assert sorted(p.name for p in lay.host_logs("b1").iterdir()) == ["broker.log", "broker.rc"]
    _archive(tmp_path / "p1.tgz", {
        "run/logs/publisher.csv": "seq,t_send_us,bytes\n0,1030000000,65\n",
        "run/logs/publisher_summary.json": '{"simulated": true}', "procs/publisher.rc": "0\n",
        "clock/pre.csv": _exchanges(-700, 1_000_000_000), "clock/post.csv": _exchanges(-700, 1_060_000_000)})
    record = collect.collect_publishers(tmp_path, lay, lab)["p1"]
    assert record is not None and record["available"]
    assert json.loads(lay.host_clock.read_text()) == {**record, "hosts": {"p1": record}}
    assert lay.publisher_log.read_text() == "seq,t_send_us,bytes\n0,1029999300,65\n"  # on the broker's clock
    assert (lay.host_logs("p1") / "publisher.csv").read_text().endswith("0,1030000000,65\n")  # its own clock
    assert (lay.host_logs("p1") / "clock_pre.csv").exists() and lay.publisher_summary.exists()


def test_losses_before_the_capture_are_the_holes_a_resend_fills() -> None:
    rows = []
    seqs = [1, 85, 253, 169, 337, 421, 673, 505, 589]  # 169 lost once, 505+589 lost and resent separately
    for frame, seq in enumerate(seqs, start=1):
        rows.append({"frame": frame, "stream": 0, "leg": "publisher->broker", "tcp_seq": seq, "tcp_len": 84})
    rows.append({"frame": 20, "stream": 0, "leg": "publisher->broker", "tcp_seq": 757, "tcp_len": 0})
    rows.append({"frame": 21, "stream": 1, "leg": "broker->subscriber", "tcp_seq": 9000, "tcp_len": 84})
    got = losses_before_capture(pd.DataFrame(rows))
    assert got == {"tcp_segments_lost_before_capture": 3, "tcp_holes_before_capture": 2,
                   "tcp_bytes_lost_before_capture": 84 * 3}
    clean = pd.DataFrame([{"frame": i, "stream": 0, "leg": "publisher->broker", "tcp_seq": 1 + 84 * i,
                           "tcp_len": 84} for i in range(10)])
    assert losses_before_capture(clean)["tcp_segments_lost_before_capture"] == 0


def test_the_host_clock_gets_the_boards_verdict() -> None:
    clock = {"available": True, "bound_us": 80.0, "pre": {"offset_us": 10.0}}
    metrics = {"uplink_ms": {"available": True, "median": 0.1}, "delay_ms": {"available": True, "median": 0.3}}
    block = with_host_clock(metrics, clock)
    assert block["one_way_delay"]["available"] is False and "not available at that precision" in block[
        "one_way_delay"]["reason"]
    assert metrics["delay_ms"]["available"] is False and metrics["uplink_ms"]["available"] is False
    precise = {"uplink_ms": {"available": True, "median": 5.0}, "delay_ms": {"available": True, "median": 6.0}}
    assert with_host_clock(precise, clock)["one_way_delay"]["available"] is True
    assert precise["delay_ms"]["median"] == 6.0
    unknown = {"uplink_ms": {"available": True, "median": 5.0}, "delay_ms": {"available": True, "median": 6.0}}
    block = with_host_clock(unknown, {"available": False, "reason": "no exchange answered"})
    assert block["one_way_delay"]["available"] is False and "no exchange answered" in unknown["delay_ms"]["reason"]


ROUTER_STATE = """$ [lab-router] tc qdisc show dev eth0
qdisc noqueue 0: root refcnt 2
$ [lab-router] nft list table inet testbed_impair
table inet testbed_impair {
	chain publisher_eth1 {
		ip daddr 10.0.2.10 numgen random mod 100 < 5 counter packets 17 bytes 2312 drop
	}
}
$ [lab-router] tc qdisc show dev eth1
qdisc noqueue 0: root refcnt 2
$ [lab-router] nft list table inet testbed_impair
table inet testbed_impair {
	chain publisher_eth1 {
		ip daddr 10.0.2.10 numgen random mod 100 < 5 counter packets 17 bytes 2312 drop
	}
}
"""


def test_a_router_with_two_targets_counts_its_one_nft_table_once() -> None:
    assert dropped_packets(ROUTER_STATE) == 17  # listed once per target: not 34
    two_routers = ROUTER_STATE + ROUTER_STATE.replace("lab-router", "router-2").replace("packets 17", "packets 3")
    assert dropped_packets(two_routers) == 20
    assert dropped_packets("counter packets 4 bytes 10 drop\ncounter packets 1 bytes 2 drop") == 5  # no heads
    assert dropped_packets("$ [h] tc qdisc show dev eth0\nqdisc noqueue 0: root") is None
