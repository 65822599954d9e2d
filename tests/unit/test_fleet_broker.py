"""The broker's cost at scale on synthetic series (analysis/fleetbroker.py): phases from the capture, CPU per
message and per handshake, memory per connected client, and the 90 %-of-a-core verdict both ways."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import fleetbroker as fb

T0 = 1_800_000_000.0  # epoch s


def cpu_series(rates: list[tuple[float, float]], start: float = T0) -> list[list[float]]:
    """One sample a second; ``rates``: (until t, cores) in order. CPU ns since start."""
    out, cpu, t = [[start, 0.0]], 0.0, start
    for until, cores in rates:
        while t < until:
            t += 1.0
            cpu += cores * 1e9
            out.append([t, cpu])
    return out


def phases(first: float, connected: float, handshakes: int) -> fb.Phases:
    return fb.Phases(first, connected, np.linspace(first, connected - 0.01, handshakes), "test")


def test_phases_come_from_the_capture_syns_and_each_devices_first_publish() -> None:
    packets = pd.DataFrame({
        "leg": ["publisher->broker"] * 5 + ["broker->publisher"],
        "stream": [1, 1, 2, 2, 3, 1], "time": [T0 + 1, T0 + 1.1, T0 + 2, T0 + 2.5, T0 + 3, T0 + 1.05],
        "tcp_flags": [0x02, 0x10, 0x02, 0x18, 0x02, 0x12]})
    pm = pd.DataFrame({"device": ["a", "a", "b"], "seq": [0, 1, 0],
                       "broker_in_us": pd.array([(T0 + 1.5) * 1e6, (T0 + 2.5) * 1e6, (T0 + 3.5) * 1e6],
                                                dtype="Int64")})
    conn = pd.DataFrame({"t_start_us": [T0 * 1e6]})
    ph = fb.phases(packets, pm, conn)
    assert ph.handshakes_s.tolist() == [T0 + 1, T0 + 2, T0 + 3]  # SYN without ACK, one per stream
    assert ph.first_connect_s == T0 + 1 and ph.all_connected_s == T0 + 3.5  # b's first PUBLISH
    assert ph.source.startswith("capture")
    no_capture = fb.phases(packets.iloc[:0], pm, conn)
    assert no_capture.handshakes_s.tolist() == [T0] and no_capture.source.startswith("connections.csv")


def test_cpu_per_message_uses_the_steady_windows_and_per_handshake_the_connect_phase() -> None:
    # connect phase T0+10 .. T0+20: 0.5 cores, 10 handshakes a second; steady after: 0.2 cores, 100 messages/s
    series = cpu_series([(T0 + 10, 0.05), (T0 + 20, 0.5), (T0 + 40, 0.2)])
    arrivals = np.concatenate([np.arange(T0 + 20, T0 + 40, 0.01) + 0.005])
    block = fb.broker_block({"process": series, "cgroup": None}, {"process": None, "cgroup": None},
                            phases(T0 + 10, T0 + 20, 100), arrivals, connected=100, host_cpus=8)
    per_msg = block["per_message"]
    assert block["cpu_source"] == "process"
    assert per_msg["cpu_ms_per_event"] == pytest.approx(2.0) and per_msg["windows"] == 20
    assert per_msg["ci95_low"] == pytest.approx(2.0) and per_msg["ci95_high"] == pytest.approx(2.0)
    per_hs = block["per_handshake"]
    assert per_hs["events"] == 100 and per_hs["cpu_ms_per_event"] == pytest.approx(50.0)
    assert "nothing subtracted" in per_hs["note"]
    limit = block["broker_cpu_limit"]
    assert limit["peak_cores"] == pytest.approx(0.5) and limit["steady_mean_cores"] == pytest.approx(0.2)
    assert limit["broker_ceiling"] is False and limit["host_cpus"] == 8


def test_the_cgroup_series_is_used_only_without_the_process_one() -> None:
    series = cpu_series([(T0 + 30, 0.3)])
    block = fb.broker_block({"process": [], "cgroup": series}, {}, phases(T0 + 5, T0 + 10, 5),
                            np.arange(T0 + 10, T0 + 30, 0.1), connected=5, host_cpus=None)
    assert block["cpu_source"] == "cgroup" and block["broker_cpu_limit"]["source"] == "cgroup"
    assert block["per_message"]["cpu_ms_per_event"] == pytest.approx(30.0)
    assert block["memory_per_client"]["reason"].startswith("no memory series")


def test_memory_per_client_from_before_the_first_to_once_all_are_connected() -> None:
    # 20 MB idle; 1000 devices connect between T0+10 and T0+20, 48 KiB each; afterwards it stays there
    t = np.arange(T0, T0 + 40, 1.0)
    used = np.where(t < T0 + 10, 20e6, np.where(t < T0 + 20, 20e6 + (t - T0 - 10) * 100 * 49152,
                                                 20e6 + 1000 * 49152))
    series = [[float(a), float(b)] for a, b in zip(t, used, strict=True)]
    out = fb.memory_per_client(series, T0 + 10.5, T0 + 19.5, connected=1000, source="process")
    assert out["before_bytes"] == 20_000_000 and out["after_bytes"] == 20_000_000 + 1000 * 49152
    assert out["bytes_per_client"] == 49152.0
    late = fb.memory_per_client(series[15:], T0 + 10.5, T0 + 19.5, connected=1000, source="process")
    assert late["bytes_per_client"] is None and "starts after the first device" in late["reason"]


def test_the_broker_is_called_the_ceiling_only_at_90_percent_of_a_core_in_the_steady_windows() -> None:
    busy = cpu_series([(T0 + 10, 1.0), (T0 + 30, 0.95)])
    limit = fb.cpu_limit(busy, T0 + 10, 4, "process")
    assert limit["broker_ceiling"] is True and limit["steady_windows"] == 20
    assert limit["steady_mean_cores"] == pytest.approx(0.95)
    assert limit["verdict"].startswith("the broker's ceiling: its CPU averaged 0.95 cores")
    # a connect storm at a full core, then 0.6 cores steady: the peak alone does not make a ceiling
    idle = cpu_series([(T0 + 10, 1.0), (T0 + 30, 0.6)])
    limit = fb.cpu_limit(idle, T0 + 10, 4, "process")
    assert limit["peak_cores"] == pytest.approx(1.0) and limit["broker_ceiling"] is False
    assert limit["verdict"].startswith("not the broker's ceiling: its CPU averaged 0.60 cores")
    assert "the limit, if any, was elsewhere" in limit["verdict"]
    assert "the loader shares the 4 CPUs with the broker" in limit["verdict"]
    none = fb.cpu_limit(busy, None, None, "process")
    assert none["broker_ceiling"] is False and none["verdict"].startswith("no steady-phase window")


def test_core_windows_join_samples_closer_than_a_second() -> None:
    series = [[T0, 0], [T0 + 0.5, 0.25e9], [T0 + 1.0, 0.5e9], [T0 + 1.4, 0.9e9], [T0 + 2.0, 1.5e9]]
    wins = fb.core_windows(series)
    assert [(a - T0, b - T0) for a, b, _ in wins] == [(0.0, 1.0), (1.0, 2.0)]
    assert [round(c, 6) for *_, c in wins] == [0.5, 1.0]


def test_between_keeps_the_samples_spanning_a_phase() -> None:
    series = [[T0 + i, i * 1e9] for i in range(10)]
    assert [r[0] - T0 for r in fb.between(series, T0 + 2.5, T0 + 5.5)] == [2, 3, 4, 5, 6]
    assert [r[0] - T0 for r in fb.between(series, None, T0 + 1.0)] == [0, 1]


def test_the_steady_phase_ends_when_the_first_device_stops() -> None:
    # a, b connect by T0+2; a stops at T0+10, b at T0+20: the plateau is T0+2 .. T0+10
    pm = pd.DataFrame({"device": ["a", "a", "b", "b"], "seq": [0, 1, 0, 1],
                       "broker_in_us": pd.array([(T0 + 1) * 1e6, (T0 + 10) * 1e6, (T0 + 2) * 1e6, (T0 + 20) * 1e6],
                                                dtype="Int64")})
    packets = pd.DataFrame({"leg": ["publisher->broker"] * 2, "stream": [1, 2], "time": [T0 + 0.5, T0 + 1.5],
                            "tcp_flags": [0x02, 0x02]})
    ph = fb.phases(packets, pm, pd.DataFrame({"t_start_us": []}))
    assert (ph.all_connected_s, ph.first_done_s, ph.steady_until_s) == (T0 + 2, T0 + 10, T0 + 10)
    # the ramp-down after T0+10 (one device left, 0.5 cores) must not dilute a full core on the plateau
    series = cpu_series([(T0 + 2, 0.5), (T0 + 10, 0.97), (T0 + 20, 0.5)])
    limit = fb.cpu_limit(series, ph.all_connected_s, 2, "process", ph.steady_until_s)
    assert limit["steady_windows"] == 8 and limit["steady_mean_cores"] == pytest.approx(0.97)
    assert limit["broker_ceiling"] is True
    assert fb.cpu_limit(series, ph.all_connected_s, 2, "process")["broker_ceiling"] is False  # diluted
    assert fb.Phases(T0, T0 + 5, np.empty(0), "x", T0 + 4).steady_until_s is None  # no plateau: to the end
