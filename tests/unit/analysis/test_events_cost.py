"""analysis/events.py on a small made-up cell with events: three devices, a broker restart at t = 100 s and a link
down from 110 to 112 s; every figure is checked by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.analysis.events import LATE_MS, events_metrics

RESTART = {"kind": "broker-restart", "at_s": 10.0, "duration_s": 0.0, "t_start": 100.0, "broker_back": 100.5,
           "t_end": 100.5, "at_epoch": 100.0}
LINK = {"kind": "link-down", "at_s": 20.0, "duration_s": 2.0, "t_start": 110.0, "t_down": 110.01, "t_up": 112.0,
        "t_end": 112.0, "at_epoch": 110.0}


def _conns() -> pd.DataFrame:
    rows = [  # device, its connection number, SYN, CONNACK, end, kind
        ("f0000", 0, 90.0, 90.1, 100.0, "full"), ("f0001", 0, 91.0, 91.1, 100.0, "full"),
        ("f0002", 0, 92.0, 92.1, 95.0, "full"), ("f0002", 1, 96.0, 96.1, None, "resumed-ticket"),
        ("unattributed", 0, 100.2, None, 100.2, "unknown"),  # refused while the broker was down
        ("f0000", 1, 100.6, 100.8, None, "full"), ("f0001", 1, 101.0, 101.3, 104.0, "full"),
        ("f0001", 2, 105.0, 105.1, None, "resumed-ticket"),
    ]
    return pd.DataFrame(rows, columns=["device", "device_conn", "syn_time", "connack_time", "end_time", "handshake"])


def _messages() -> pd.DataFrame:
    rows = [  # device, seq, sent, at the broker, at the subscriber
        ("f0000", 0, 99.0, 99.01, 1), ("f0000", 1, 100.1, None, 0),  # lost: sent into the dead connection
        ("f0000", 2, 101.0, 101.01, 1), ("f0001", 0, 101.5, 101.51, 1),
        ("f0002", 0, 102.0, 102.01, 1),  # on the connection that (made up) outlived the restart
        ("f0000", 3, 111.0, 112.2, 1),  # held through the link's outage: late
        ("f0001", 1, 113.0, 113.01, 1), ("f0002", 1, 113.5, 113.51, 1),
    ]
    pm = pd.DataFrame(rows, columns=["device", "seq", "t_send", "broker_in", "recv_count"])
    pm["t_send_us"] = (pm.pop("t_send") * 1e6).round()
    pm["broker_in_us"] = pm.pop("broker_in") * 1e6
    pm["broker_out_us"] = pm["broker_in_us"] + 1000.0
    return pm


def test_a_restart_and_a_link_down_cost_what_the_capture_says() -> None:
    cpu = [[95.0 + i, 1e9 * 0.1 * i] for i in range(20)]  # 0.1 core throughout
    out = events_metrics([LINK, RESTART], _conns(), _messages(), cpu)
    restart, link = out["events"]
    assert (restart["kind"], link["kind"]) == ("broker-restart", "link-down") and out["devices"] == 3
    # reconnected: f0000 at 100.8, f0001 at 101.3; f0002's connection (opened at 96) outlived the restart here
    assert restart["reconnected_s"] == {"n": 2, "p50": pytest.approx(1.05), "p99": pytest.approx(1.295),
                                        "max": pytest.approx(1.3)}
    assert restart["kept_connection"] == 1
    # publishing again after 100.5: f0000 101.01, f0001 101.51, f0002 102.01
    assert restart["publishing_s"]["max"] == pytest.approx(2.01) and restart["not_back"] == 0
    assert restart["handshakes_before"] == {"full": 3, "resumed-ticket": 1}
    assert restart["handshakes_during"] == {"unknown": 1}
    assert restart["handshakes_after"] == {"full": 2, "resumed-ticket": 1}
    assert restart["first_after"] == {"full": 2} and restart["resumption_hit_rate_first_after"] == 0.0
    assert restart["resumption_hit_rate"] == 1.0
    # the messages from 1 s before the restart to the link's event: one lost on the device's side of the capture
    assert restart["messages"]["lost"] == 1 and restart["messages"]["lost_not_on_capture"] == 1
    # the link: nobody reconnected (every connection outlived 2 s), everyone published after 112.0
    assert link["reconnected_s"]["n"] == 0 and link["kept_connection"] == 3 and link["not_back"] == 0
    assert link["messages"]["late"] == 1 and link["messages"]["late_uplink_s"]["max"] == pytest.approx(1.2)
    assert link["messages"]["late_ms_threshold"] == LATE_MS
    whole = out["messages"]
    assert (whole["sent"], whole["delivered"], whole["late"], whole["lost"]) == (8, 7, 1, 1)
    assert whole["devices_with_loss"] == 1 and whole["most_lost_by_one_device"] == 1
    tl = out["timeline"]
    assert tl["t"][0] == 0.5 and tl["connected"][0] == 1  # at 90.5 only f0000's CONNACK is in
    assert sum(sum(v) for v in tl["handshakes"].values()) == len(_conns())
    assert sum(tl["readings"]) == 7  # the lost one never reached the broker
    assert tl["broker_cores"]["cores"] == pytest.approx([0.1] * len(tl["broker_cores"]["cores"]))


def test_one_device_without_a_name_is_counted_back() -> None:
    """A single device's run (no --devices): per_message has no device column and its connections no device name.
    Its reconnection and its publishing again count as the one device's, not as a device that never came back
    (found measuring issue 26's link drop: not_back 1, reconnected n 0 for a device back after 5 s)."""
    conns = _conns()
    conns = conns[conns["device"] == "f0000"].assign(device=None)
    pm = _messages()
    pm = pm[pm["device"] == "f0000"].drop(columns="device")
    restart = events_metrics([RESTART], conns, pm, None)["events"][0]
    assert restart["reconnected_s"]["n"] == 1 and restart["reconnected_s"]["max"] == pytest.approx(0.8)
    assert restart["kept_connection"] == 0 and restart["not_back"] == 0
    assert restart["publishing_s"]["max"] == pytest.approx(1.01)
    assert restart["first_after"] == {"full": 1}
