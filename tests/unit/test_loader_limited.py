"""The one verdict on a fleet's loader (analysis/fleetlag.py) on synthetic logs: the steady phase, the connect phase
(how late each device's first connection began), per host when the logs name hosts; none late, the steady phase
only, the connect phase only, one of two hosts. Where it is carried: tests/unit/report/test_loader_limited_report.py."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.analysis import fleet, fleetlag

T0 = 1_800_000_000_000_000  # epoch us
SETUP_MS = (1.0, 20.0, 2.0)  # each device's own tcp_connect, handshake, connack


def fleet_logs(devices: int, samples: int, *, start_lag_us: dict[int, int] | None = None,
               steady_late: dict[tuple[int, int], int] | None = None,
               hosts: dict[int, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Send logs and connections.csv of ``devices`` devices at 100/s, one reading a second: device i's connection
    began ``start_lag_us[i]`` after its start (its first send waits that plus its set-up); ``steady_late``: a
    later send (device, seq) that much later than its schedule; ``hosts``: the ``host`` column."""
    start_lag_us, steady_late = start_lag_us or {}, steady_late or {}
    setup_us = int(sum(SETUP_MS) * 1000)
    rows = []
    for i in range(devices):
        first = start_lag_us.get(i, 150) + setup_us  # an unloaded loader: 0.15 ms to wake and build the transport
        for seq in range(samples):
            intended = T0 + i * 10_000 + seq * 1_000_000
            sent = intended + first + steady_late.get((i, seq), 0)
            rows.append({"device": f"f{i:04d}", "seq": seq, "t_send_us": sent, "bytes": 65, "t_intended_us": intended})
    send = pd.DataFrame(rows)
    conns = pd.DataFrame({"device": [f"f{i:04d}" for i in range(devices)],
                          "t_start_us": [T0 + i * 10_000 for i in range(devices)],
                          "tcp_connect_ms": SETUP_MS[0], "handshake_ms": SETUP_MS[1], "connack_ms": SETUP_MS[2],
                          "messages": samples, "error": ""})
    if hosts is not None:
        send["host"] = send["device"].map(lambda d: hosts[int(d[1:])])
        conns["host"] = conns["device"].map(lambda d: hosts[int(d[1:])])
    return send, conns


def test_nobody_late_is_not_loader_limited() -> None:
    send, conns = fleet_logs(100, 20)
    out = fleetlag.schedule_lag(send, conns)
    assert out["connect"]["n"] == 100 and out["connect"]["p99"] == pytest.approx(150)  # the start lag, set-up out
    assert out["connect"]["from"] == ["first send less its set-up"]
    assert out["loader_limited"] is False and out["loader_kept_schedule"] is True and out["late"] == []
    assert out["verdict"].startswith("the loader kept its schedule: ") and "connections began p99 0.150 ms" in \
        out["verdict"]
    assert "hosts" not in out  # one host: the logs name none


def test_a_late_steady_phase_only_is_loader_limited() -> None:
    late = {(i, seq): 30_000 for i in range(100) for seq in range(1, 20) if seq % 10 == 0}  # 100 of 1,900: 5.3 %
    send, conns = fleet_logs(100, 20, steady_late=late)
    out = fleetlag.schedule_lag(send, conns)
    assert out["connect"]["late"] is False and out["steady"]["late"] is True
    assert out["loader_limited"] is True
    assert [(x["host"], x["phase"]) for x in out["late"]] == [("", "steady")]
    assert out["late"][0]["share"] == pytest.approx(100 / 1900)
    assert out["verdict"].startswith("the loader FELL BEHIND (loader-limited): 5.3 % of the sends after each")
    assert "connect phase" not in out["verdict"]


def test_a_late_connect_phase_only_is_loader_limited_and_its_handshakes_are_the_loaders() -> None:
    # 3 of 100 devices began their connection 40 ms after their start (a loader busy at the ramp), the steady
    # phase on time: the old verdict (steady only) called this loader on schedule
    send, conns = fleet_logs(100, 20, start_lag_us={7: 40_000, 8: 45_000, 9: 60_000})
    block = fleet.fleet_block(pd.DataFrame({"device": pd.Series([], dtype=str), "seq": [], "recv_count": [],
                                            "broker_in_us": [], "broker_out_us": [], "delay_ms": []}),
                              send, conns, {}, devices=100, samples=20)
    lag = block["schedule_lag_us"]
    assert lag["loader_kept_schedule"] is False
    assert lag["steady"]["late"] is False and lag["connect"]["late"] is True
    assert lag["connect"]["share_late_10ms"] == pytest.approx(0.03) and lag["connect"]["max"] == pytest.approx(60_000)
    assert [(x["phase"], x["n"]) for x in lag["late"]] == [("connect", 100)]
    assert "3.0 % of the devices' connections began more than 10 ms late (p99 45.0 ms): their handshake times are " \
           "the loader's as much as the broker's" in lag["verdict"]
    assert lag["verdict"] in fleet.warnings(block)


def test_the_connections_log_gives_when_the_connection_began() -> None:
    # a run with a connection lifecycle: t_open_us of each device's connection 0 says when it began; its first
    # send's lag (here 5 s, a first connection refused and retried after a pause) is then not read as lateness
    send, conns = fleet_logs(4, 10, start_lag_us={2: 5_000_000})
    opens = pd.DataFrame({"device": [f"f{i:04d}" for i in range(4)] * 2, "conn": [0] * 4 + [1] * 4,
                          "t_open_us": [T0 + i * 10_000 + 200 for i in range(4)] + [T0 + 9_000_000] * 4})
    out = fleetlag.schedule_lag(send, conns, opens)
    assert out["connect"]["from"] == ["t_open_us of connection 0"] and out["connect"]["max"] == pytest.approx(200)
    assert out["loader_limited"] is False
    assert fleetlag.schedule_lag(send, conns)["connect"]["max"] == pytest.approx(5_000_000)  # without it: late


def test_one_of_two_hosts_late_is_named() -> None:
    # host b's one device was late on 5 of its 19 later sends (26 %); over the whole fleet that is 5 of 1,539
    # (0.3 %): judged over the fleet the loader kept up, judged per host b fell behind
    hosts = {i: "a" if i < 80 else "b" for i in range(82)}
    late = {(81, seq): 25_000 for seq in (3, 6, 9, 12, 15)}
    send, conns = fleet_logs(82, 20, steady_late=late, hosts=hosts)
    out = fleet.schedule_lag(send)
    assert out["steady"]["share_late_10ms"] == pytest.approx(5 / 1558)  # the fleet as one: under 1 %
    assert out["loader_kept_schedule"] is False
    assert set(out["hosts"]) == {"a", "b"} and out["hosts"]["b"]["devices"] == 2
    assert out["hosts"]["a"]["steady"]["late"] is False and out["hosts"]["b"]["steady"]["late"] is True
    assert [(x["host"], x["phase"]) for x in out["late"]] == [("b", "steady")]
    assert out["verdict"].startswith("the loader FELL BEHIND (loader-limited): host b: 13.2 % of the sends")
    kept = fleetlag.schedule_lag(*fleet_logs(82, 20, hosts=hosts))
    assert kept["loader_limited"] is False and kept["verdict"].startswith("the loader kept its schedule on every host")


def test_hosts_from_connections_csv_when_the_send_logs_name_none() -> None:
    hosts = {i: "a" if i < 50 else "b" for i in range(100)}
    send, conns = fleet_logs(100, 5, start_lag_us={60: 30_000}, hosts=hosts)
    out = fleetlag.schedule_lag(send.drop(columns="host"), conns)
    assert [(x["host"], x["phase"], x["share"]) for x in out["late"]] == [("b", "connect", 0.02)]


def test_an_events_outage_is_the_events_not_the_loaders() -> None:
    # a broker restart 5 s in: every device's sends due in the next 3 s wait for its reconnection (up to 2.5 s late);
    # the storm block says the last device published again 2.999 s after the event. Outside it the loader kept up.
    start_s = (T0 + 5_000_000) / 1e6
    late = {(i, seq): 2_500_000 - (seq - 5) * 1_000_000 for i in range(50) for seq in (5, 6, 7)}
    send, conns = fleet_logs(50, 20, steady_late=late)
    storm = {"events": [{"start": start_s, "publishing_s": {"max": 2.999}, "not_back": 0}]}
    outages = fleetlag.outages_of(storm)
    assert outages == [(start_s, start_s + 2.999)]
    judged = fleetlag.schedule_lag(send, conns, outages=outages)
    assert judged["loader_limited"] is False and judged["steady"]["outage_excluded"] == 150
    assert judged["steady"]["n"] == 50 * 19 - 150 and judged["connect"]["outage_excluded"] == 0
    blind = fleetlag.schedule_lag(send, conns)  # the outage taken for the loader: 150 of 950 sends late
    assert blind["loader_limited"] is True and blind["steady"]["share_late_10ms"] == pytest.approx(150 / 950)
    assert fleetlag.outages_of({"events": [{"start": 1.0, "publishing_s": {"max": 2.0}, "not_back": 3}]}) == \
        [(1.0, float("inf"))]
