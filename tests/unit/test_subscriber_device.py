"""The subscriber logs each message's device (clients/subscriber.py); the analysis reads the receive log in
both its formats (analysis/logs.py); the broker's memory is sampled as a series (backends/docker_stats.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from orchestrator.analysis.logs import SUBSCRIBER_COLUMNS, SUBSCRIBER_DEVICE_COLUMNS, read_subscriber_log
from orchestrator.backends.docker_stats import StatsSampler, cgroup_memory_bytes, process_rss_bytes
from orchestrator.clients.payload import parse_message, parse_payload
from orchestrator.clients.subscriber import HEADER, Recorder, csv_device


def test_the_payload_gives_its_device_seq_and_send_time() -> None:
    ours = json.dumps({"d": "f0042", "n": 7, "t": 1_800_000_000_123_456, "s": [1, 2, 3, 4]}).encode()
    assert parse_message(ours) == ("f0042", 7, 1_800_000_000_123_456)
    assert parse_payload(ours) == (7, 1_800_000_000_123_456)  # its callers see what they always saw
    reference = b"00000012,1800000000123456789," + b"x" * 30
    assert parse_message(reference) == ("", 12, 1_800_000_000_123_456)
    assert parse_message(b'{"n":3,"t":5}') == ("", 3, 5)
    assert parse_message(b'{"d":"a","t":5}') is None and parse_message(b"[1,2]") is None
    assert parse_message(b"\xff{") is None and parse_payload(b"hello") is None


def test_the_recorder_writes_the_device_of_every_message(tmp_path: Path) -> None:
    out = tmp_path / "subscriber.csv"
    rec = Recorder(out, None)
    rec.record(json.dumps({"d": "f0001", "n": 3, "t": 1}).encode(), dup=False)
    rec.record(b"00000004,1800000000000000000,xxxx", dup=True)
    rec.record(json.dumps({"d": "bad,id\n\u00e9", "n": 5, "t": 1}).encode(), dup=False)
    rec.record(b"not a sample", dup=False)
    rec.close()
    lines = out.read_text(encoding="ascii").splitlines()
    assert lines[0] == HEADER.strip() == "seq,t_recv_us,bytes,dup,device"
    fields = [ln.split(",") for ln in lines[1:]]
    assert [(f[0], f[3], f[4]) for f in fields] == [("3", "0", "f0001"), ("4", "1", ""), ("5", "0", "bad_id__")]
    assert all(len(f) == 5 and int(f[1]) > 1_600_000_000_000_000 for f in fields)
    assert (rec.count, rec.unparsed) == (3, 1)
    table = read_subscriber_log(out)
    assert table.warnings == [] and list(table.frame.columns) == list(SUBSCRIBER_DEVICE_COLUMNS)
    assert list(table.frame["device"]) == ["f0001", "", "bad_id__"] and list(table.frame["dup"]) == [0, 1, 0]


def test_csv_device_keeps_ids_and_mends_the_rest() -> None:
    assert csv_device("f0000") == "f0000" and csv_device("v1") == "v1" and csv_device("") == ""
    assert csv_device('a"b,c') == "a_b_c" and len(csv_device("x" * 100)) == 64


def test_the_receive_log_is_read_in_its_old_and_its_new_format(tmp_path: Path) -> None:
    old = tmp_path / "old.csv"
    old.write_text("seq,t_recv_us,bytes,dup\n0,100,65,0\n1,200,65,true\n")
    t = read_subscriber_log(old)
    assert list(t.frame.columns) == list(SUBSCRIBER_COLUMNS) and t.frame["dup"].tolist() == [0, 1]
    assert t.frame.dtypes.tolist() == ["int64"] * 4
    new = tmp_path / "new.csv"
    new.write_text("0,100,65,0,f0000\n0,110,65,0,f0001\n1,200,65,1,\n")  # no header: told by its field count
    t = read_subscriber_log(new)
    assert list(t.frame.columns) == list(SUBSCRIBER_DEVICE_COLUMNS) and t.warnings == []
    assert list(zip(t.frame["seq"], t.frame["device"], strict=True)) == [(0, "f0000"), (0, "f0001"), (1, "")]
    assert t.frame["t_recv_us"].dtype == "int64"
    new.write_text("seq,t_recv_us,bytes,dup,device\n0,100,65,0,f0000\n0,1x0,65,0,f0001\n1,200,65,yes,f0002\n"
                   "2,300,65,0,f0000")
    t = read_subscriber_log(new)
    assert list(zip(t.frame["seq"], t.frame["dup"], t.frame["device"], strict=True)) == [(0, 0, "f0000"),
                                                                                         (1, 1, "f0002")]
    assert len(t.warnings) == 2 and "line 5" in t.warnings[0] and "(line 3)" in t.warnings[1]
    empty = tmp_path / "empty.csv"
    empty.write_text("seq,t_recv_us,bytes,dup,device\n")
    t = read_subscriber_log(empty)
    assert len(t.frame) == 0 and list(t.frame.columns) == list(SUBSCRIBER_DEVICE_COLUMNS)
    assert pd.api.types.is_string_dtype(t.frame["device"])


def test_cgroup_memory_is_usage_less_the_page_cache() -> None:
    assert cgroup_memory_bytes({"usage": 100_000, "stats": {"inactive_file": 30_000}}) == 70_000  # cgroup v2
    assert cgroup_memory_bytes({"usage": 100_000, "stats": {"total_inactive_file": 10_000, "cache": 50_000}}) == 90_000
    assert cgroup_memory_bytes({"usage": 100_000, "stats": {"cache": 40_000}}) == 60_000  # old engines
    assert cgroup_memory_bytes({"usage": 100_000, "stats": {"inactive_file": 200_000}}) == 100_000
    assert cgroup_memory_bytes({"usage": 100_000}) == 100_000 and cgroup_memory_bytes({}) is None


def test_the_sampler_keeps_memory_series_beside_the_cpu_ones() -> None:
    rss = process_rss_bytes(os.getpid())
    assert rss is not None and rss > 1_000_000 and process_rss_bytes(None) is None
    sampler = StatsSampler("broker")
    sampler.pid = os.getpid()
    for i, used in enumerate((50_000_000, 52_000_000)):
        sampler._take({"read": f"2027-01-15T08:00:0{i}.250000000Z", "cpu_stats": {"cpu_usage": {"total_usage": 10 + i}},
                       "memory_stats": {"usage": used, "max_usage": used, "stats": {"inactive_file": 1_000_000}}})
    out = sampler.stop()
    assert [b for _t, b in out["broker_mem_series"]] == [49_000_000, 51_000_000]
    assert out["broker_mem_series"][1][0] - out["broker_mem_series"][0][0] == 1.0
    # one RSS reading per sample, and one more when the sampler stops (it does not wait for the stream's next sample)
    assert len(out["broker_process_rss_series"]) == 3 and out["broker_process_rss_series"][0][1] > 1_000_000
    assert out["broker_peak_mem_bytes"] == 52_000_000 and out["host_cpus"] == os.cpu_count()
