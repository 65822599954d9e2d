"""A fleet's analysis on hand-made tables: messages keyed by (device, seq), each lost message placed by the
capture, devices.csv, the fleet block's loss, histogram and schedule-lag figures (analysis/fleet.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import fleet
from orchestrator.analysis.logs import read_fleet_logs
from orchestrator.analysis.messages import FLEET_KEY, PER_MESSAGE_COLUMNS, per_message_table
from orchestrator.analysis.metrics import fleet_loss, jitter

T0 = 1_800_000_000_000_000  # epoch us


def leg(rows: list[tuple[str, int, float]], frame0: int) -> pd.DataFrame:
    """A capture leg as analysis/messages.py's explode_mqtt gives it: (device, seq, capture time s) per PUBLISH."""
    n = len(rows)
    return pd.DataFrame({
        "device": pd.array([r[0] for r in rows], dtype="str"),
        "seq": pd.array([r[1] for r in rows], dtype="Int64"),
        "payload_t_send_us": pd.array([T0 + r[1] * 1_000_000 for r in rows], dtype="Int64"),
        "time": [r[2] for r in rows], "frame": np.arange(frame0, frame0 + n), "msgs_in_frame": [1] * n,
        "payload_len": pd.array([65] * n, dtype="Int64"), "mqtt_len": pd.array([76] * n, dtype="Int64"),
        "tls_record_len": pd.array([92] * n, dtype="Int64"), "tcp_len": [97.0] * n, "frame_len": [163] * n})


def send_log(rows: list[tuple[str, int, int]], lag_us: dict[tuple[str, int], int] | None = None) -> pd.DataFrame:
    """(device, seq, t_send_us); t_intended_us = t_send_us - lag (0 unless given)."""
    lag_us = lag_us or {}
    return pd.DataFrame({"device": pd.array([r[0] for r in rows], dtype="str"), "seq": [r[1] for r in rows],
                         "t_send_us": [r[2] for r in rows], "bytes": [65] * len(rows),
                         "t_intended_us": [r[2] - lag_us.get((r[0], r[1]), 0) for r in rows]})


def sub_log(rows: list[tuple[str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame({"seq": [r[1] for r in rows], "t_recv_us": [r[2] for r in rows], "bytes": [65] * len(rows),
                         "dup": [0] * len(rows), "device": pd.array([r[0] for r in rows], dtype="str")})


def two_devices() -> tuple[pd.DataFrame, pd.DataFrame]:
    """f0000 and f0001 both send seq 0 and 1 (one second apart): same seq numbers, different messages.

    f0000/0 delivered (2 ms); f0000/1 reached the broker only; f0001/0 forwarded, not in the receive log;
    f0001/1 never on the capture; f0001 also delivers seq 2 (5 ms)."""
    pub = send_log([("f0000", 0, T0), ("f0000", 1, T0 + 1_000_000), ("f0001", 0, T0 + 100),
                    ("f0001", 1, T0 + 1_000_100), ("f0001", 2, T0 + 2_000_100)])
    inb = leg([("f0000", 0, (T0 + 500) / 1e6), ("f0000", 1, (T0 + 1_000_500) / 1e6),
               ("f0001", 0, (T0 + 600) / 1e6), ("f0001", 2, (T0 + 2_000_600) / 1e6)], 10)
    outb = leg([("f0000", 0, (T0 + 900) / 1e6), ("f0001", 0, (T0 + 1000) / 1e6),
                ("f0001", 2, (T0 + 2_001_000) / 1e6)], 20)
    sub = sub_log([("f0000", 0, T0 + 2000), ("f0001", 2, T0 + 2_005_100)])
    warnings: list[str] = []
    pm = per_message_table(inb, outb, pub, sub, warnings, FLEET_KEY)
    assert warnings == []
    return pm, pub


def test_two_devices_sharing_sequence_numbers_are_different_messages() -> None:
    pm, _ = two_devices()
    assert list(pm.columns) == ["device", *PER_MESSAGE_COLUMNS]
    assert list(zip(pm["device"], pm["seq"], strict=True)) == [("f0000", 0), ("f0000", 1), ("f0001", 0),
                                                               ("f0001", 1), ("f0001", 2)]
    delays = dict(zip(zip(pm["device"], pm["seq"], strict=True), pm["delay_ms"], strict=True))
    assert delays[("f0000", 0)] == 2.0 and delays[("f0001", 2)] == 5.0
    assert pd.isna(delays[("f0001", 0)])  # forwarded but never logged by the subscriber
    assert pm.loc[2, "broker_in_us"] == T0 + 600 and pm.loc[2, "broker_out_us"] == T0 + 1000
    assert list(pm["t_send_source"]) == ["publisher log"] * 5
    assert list(pm["recv_count"]) == [1, 0, 0, 0, 1]


def test_each_lost_message_is_placed_by_what_the_capture_shows() -> None:
    pm, pub = two_devices()
    fates = fleet.message_fates(pm, pub)
    lost = fates[fates["lost"]]
    assert list(zip(lost["device"], lost["seq"], lost["lost_at"], strict=True)) == [
        ("f0000", 1, fleet.NOT_FORWARDED), ("f0001", 0, fleet.NOT_RECEIVED), ("f0001", 1, fleet.NOT_ON_CAPTURE)]
    block = fleet.fleet_block(pm, pub, fleet.read_connections(Path("/nonexistent")), {}, devices=2, samples=3)
    msgs = block["messages"]
    assert (msgs["expected"], msgs["sent"], msgs["delivered"], msgs["lost"], msgs["not_sent"]) == (6, 5, 2, 3, 1)
    assert msgs["lost_at"] == {fleet.NOT_ON_CAPTURE: 1, fleet.NOT_FORWARDED: 1, fleet.NOT_RECEIVED: 1}
    assert msgs["lost_accounted"] is True and msgs["devices_with_loss"] == 2
    assert msgs["capture_coverage"]["lost_at_reliable"] is True
    assert block["one_way_delay_ms"]["n"] == 2 and block["one_way_delay_ms"]["median"] == 3.5
    assert any("3 of 5 fleet messages lost" in w for w in fleet.warnings(block))


def test_devices_csv_has_one_row_per_device_with_its_losses_and_connection(tmp_path: Path) -> None:
    pm, pub = two_devices()
    conn_path = tmp_path / "connections.csv"
    conn_path.write_text("device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,messages,error\n"
                         f"f0000,{T0},0.250,11.500,0.090,2,\nf0001,{T0 + 10_000},0.300,12.000,0.100,3,\n"
                         f"f0002,{T0 + 20_000},,,,0,ConnectFailed\nf0003,{T0 + 30_000},0.2,11.0,0.1,0,ConnackRefused\n")
    table = fleet.device_table(pm, pub, fleet.read_connections(conn_path))
    assert list(table.columns) == list(fleet.DEVICE_COLUMNS)
    rows = {r["device"]: r for r in table.to_dict("records")}
    assert (rows["f0000"]["sent"], rows["f0000"]["received"], rows["f0000"]["lost"]) == (2, 1, 1)
    assert rows["f0000"]["lost_seqs"] == "1" and rows["f0000"]["lost_at"] == f"{fleet.NOT_FORWARDED}: 1"
    assert rows["f0001"]["lost_seqs"] == "0 1"
    assert rows["f0001"]["lost_at"] == f"{fleet.NOT_ON_CAPTURE}: 1; {fleet.NOT_RECEIVED}: 1"
    assert rows["f0001"]["handshake_ms"] == 12.0 and rows["f0001"]["delay_median_ms"] == 5.0
    assert bool(rows["f0000"]["connected"]) and not bool(rows["f0002"]["connected"])
    assert not bool(rows["f0003"]["connected"])  # a CONNACK that refused it
    assert (rows["f0002"]["sent"], rows["f0002"]["error"]) == (0, "ConnectFailed")
    block = fleet.fleet_block(pm, pub, fleet.read_connections(conn_path), {}, devices=4, samples=3)
    assert block["connected"] == 2 and block["failed"]["devices"] == 2
    assert block["failed"]["by_error"] == {"ConnectFailed": 1, "ConnackRefused": 1}
    assert block["failed"]["errors"][0] == {"device": "f0002", "error": "ConnectFailed"}
    assert block["connection_setup_ms"]["handshake_ms"] == {"n": 3, "p50": 11.5, "p90": 12.0, "p99": 12.0,
                                                            "max": 12.0}
    assert any("2 of 4 fleet devices failed" in w for w in fleet.warnings(block))


def test_fleet_loss_counts_device_and_seq_pairs() -> None:
    log = sub_log([("f0000", 0, 1), ("f0001", 0, 2), ("f0001", 2, 3), ("f0001", 1, 4), ("f0000", 0, 5),
                   ("f0000", 9, 6), ("", 1, 7)])
    loss = fleet_loss(log, samples_per_device=3, devices=2)
    assert loss["sent"] == 6 and loss["received_unique"] == 4  # f0000/0, f0001/0, f0001/2, f0001/1
    assert loss["duplicates"] == 1  # the second f0000/0
    assert loss["out_of_order"] == 1  # f0001/1 after f0001/2: another device's numbers do not count
    assert loss["unexpected"] == 2  # seq 9 of 0..2, and no device id
    assert loss["loss_pct"] == pytest.approx(100 / 3)


def test_jitter_of_a_fleet_steps_within_each_device_only() -> None:
    pm = pd.DataFrame({"device": ["a", "a", "b", "b"], "seq": [0, 1, 0, 1], "delay_ms": [1.0, 2.0, 10.0, 14.0]})
    j = jitter(pm, by="device")
    assert j["mean_abs_diff"] == 2.5 and j["n"] == 4  # |2-1| and |14-10|; never |10-2| across devices


def test_histograms_of_repeats_add_up_on_fixed_edges() -> None:
    a = fleet.histogram(np.array([0.52, 0.55, 2.0, -1.0, 0.0, 20_000.0]))
    b = fleet.histogram(np.array([0.6, 3.0]))
    assert a["edges_ms"] == b["edges_ms"] == list(fleet.DELAY_EDGES_MS)
    assert len(a["edges_ms"]) == 61 and a["edges_ms"][0] == 0.01 and a["edges_ms"][-1] == 10_000.0
    assert (a["below"], a["above"], a["n"], sum(a["counts"])) == (2, 1, 6, 3)
    merged = fleet.merge_histograms([a, b])
    assert merged["n"] == 8 and merged["below"] == 2 and merged["above"] == 1 and sum(merged["counts"]) == 5
    assert merged["counts"] == [x + y for x, y in zip(a["counts"], b["counts"], strict=True)]
    i = int(np.searchsorted(fleet.DELAY_EDGES_MS, 0.52, side="right")) - 1  # 0.52, 0.55, 0.6: [0.501, 0.631)
    assert merged["counts"][i] == 3
    assert fleet.DELAY_EDGES_MS[i:i + 2] == (0.501187, 0.630957)
    assert fleet.histogram_quantile(merged, 0.5) == 0.630957  # the 4th of 8 values (0.55) is in that bin
    assert fleet.histogram_quantile(merged, 0.99) is None  # in the overflow: no bound
    with pytest.raises(ValueError, match="different edges"):
        fleet.merge_histograms([a, fleet.histogram(np.array([1.0]), edges=(0.1, 1.0, 10.0))])


def test_schedule_lag_keeps_the_first_send_apart_and_judges_the_loader_on_the_rest() -> None:
    # each device's first send waits 40 ms for its connection; later sends are 40 ms + a little late
    rows, lags = [], {}
    for d in ("f0000", "f0001"):
        for s in range(100):
            rows.append((d, s, T0 + s * 1_000_000))
            lags[(d, s)] = 40_000 + (0 if s == 0 else 200 + (15_000 if d == "f0001" and s == 99 else 0))
    out = fleet.schedule_lag(send_log(rows, lags))
    assert out["all"]["n"] == 200 and out["all"]["p50"] == 40_200 and out["all"]["max"] == 55_200
    assert out["first_send"] == {"n": 2, "p50": 40_000, "p99": 40_000, "max": 40_000, "share_late_1ms": 1.0,
                                 "share_late_10ms": 1.0}
    steady = out["steady"]
    assert (steady["n"], steady["p50"], steady["p99"], steady["max"]) == (198, 200, 200, 15_200)
    assert steady["share_late_10ms"] == pytest.approx(1 / 198)
    assert out["loader_kept_schedule"] is True and out["verdict"].startswith("the loader kept its schedule")
    late = {k: v + (20_000 if k[1] % 2 else 0) for k, v in lags.items()}  # every odd send 20 ms late
    behind = fleet.schedule_lag(send_log(rows, late))
    assert behind["loader_kept_schedule"] is False
    assert behind["steady"]["share_late_10ms"] == pytest.approx(100 / 198)  # seq 1, 3, ... 99 of 1..99, twice
    assert "FELL BEHIND" in behind["verdict"] and "50.5 %" in behind["verdict"]


def test_device_lags_are_nearest_rank_per_device() -> None:
    rows = [("a", s, T0 + s) for s in range(4)] + [("b", 0, T0)]
    lag = {("a", 0): 100, ("a", 1): 400, ("a", 2): 200, ("a", 3): 300, ("b", 0): 7}
    per = fleet.device_lags(send_log(rows, lag)).set_index("device")
    assert per.loc["a", "lag_p50_us"] == 200 and per.loc["a", "lag_p99_us"] == 400
    assert per.loc["a", "lag_max_us"] == 400 and per.loc["a", "steady_p99_us"] == 300  # 400 - the first's 100
    assert per.loc["b", "lag_max_us"] == 7 and pd.isna(per.loc["b", "steady_p99_us"])


def test_the_fleets_send_logs_are_read_into_one_table_with_the_device_from_the_file_name(tmp_path: Path) -> None:
    head = "seq,t_send_us,bytes,t_intended_us\n"
    (tmp_path / "f0000.csv").write_text(head + "0,100,65,90\n1,200,65,190\n")
    (tmp_path / "f0001.csv").write_text(head + "0,150,65,140\n")
    (tmp_path / "connections.csv").write_text("device,t_start_us,tcp_connect_ms,handshake_ms,connack_ms,"
                                              "messages,error\nf0000,1,,,,2,\n")
    (tmp_path / "summary.json").write_text("{}")
    t = read_fleet_logs(tmp_path)
    assert t.warnings == []
    assert list(t.frame.columns) == ["device", "seq", "t_send_us", "bytes", "t_intended_us"]
    assert list(zip(t.frame["device"], t.frame["seq"], t.frame["t_send_us"], strict=True)) == [
        ("f0000", 0, 100), ("f0000", 1, 200), ("f0001", 0, 150)]
    (tmp_path / "f0001.csv").write_text(head + "0,150,65,140\nx,1,2,3\n1,250,65,240\n2,3")  # junk, cut short
    t = read_fleet_logs(tmp_path)
    assert list(zip(t.frame["device"], t.frame["seq"], strict=True)) == [("f0000", 0), ("f0000", 1), ("f0001", 0),
                                                                         ("f0001", 1)]
    assert len(t.warnings) == 2 and "no newline" in t.warnings[0] and "line 3" in t.warnings[1]


def test_a_fleets_inputs_read_the_send_logs_folder_and_refuse_a_receive_log_without_devices(tmp_path: Path) -> None:
    from orchestrator.analysis.keying import DeviceFleet, keying_for
    from orchestrator.analysis.pipeline import RunInputs, _read_logs

    folder = tmp_path / "fleet"
    folder.mkdir()
    (folder / "f0000.csv").write_text("seq,t_send_us,bytes,t_intended_us\n0,100,65,90\n")
    old_sub = tmp_path / "subscriber.csv"
    old_sub.write_text("seq,t_recv_us,bytes,dup\n0,300,65,0\n")
    inputs = RunInputs(pcap=tmp_path / "c.pcapng", broker_port=8883, tls=True, samples_expected=20, payload_bytes=65,
                       subscriber_log=old_sub, publisher_log=tmp_path / "absent.csv",
                       keying=keying_for(1000, fleet_dir=folder))
    assert isinstance(inputs.keying, DeviceFleet) and inputs.keys == FLEET_KEY and inputs.messages_expected == 20_000
    pub, sub, warnings = _read_logs(inputs, [])
    assert pub is not None and list(pub["device"]) == ["f0000"] and sub is None
    assert warnings == ["the receive log of this fleet run names no device: not used (a fleet's messages are "
                        "keyed by device and seq)"]
    single = RunInputs(pcap=tmp_path / "c.pcapng", broker_port=8883, tls=True, samples_expected=20, payload_bytes=65)
    assert not isinstance(single.keying, DeviceFleet) and single.keys == ("seq",) and single.messages_expected == 20
