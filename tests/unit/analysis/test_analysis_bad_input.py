"""Bad input: each gives a clear TestbedError or an exact count and a warning, never a crash or a zero."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import convert_reference_csv, walk_pcap

from orchestrator.analysis import RunInputs, analyse_run, write_run_outputs
from orchestrator.analysis.logs import read_subscriber_log
from orchestrator.analysis.metrics import describe, jitter, loss
from orchestrator.analysis.pcapfile import scan_capture
from orchestrator.backends.tshark import export_chunks
from orchestrator.errors import TestbedError


def plain_inputs(ref: Path, pcap: Path, **over: object) -> RunInputs:
    args = dict(pcap=pcap, broker_port=1883, tls=False, samples_expected=100, payload_bytes=65)
    args.update(over)
    return RunInputs(**args)


def test_empty_file(ref: Path, tmp_path: Path) -> None:
    p = tmp_path / "empty.pcap"
    p.write_bytes(b"")
    with pytest.raises(TestbedError, match="empty"):
        analyse_run(plain_inputs(ref, p), export_chunks)


def test_header_only_pcap_is_an_error_not_a_zero(ref: Path, tmp_path: Path) -> None:
    p = tmp_path / "hdr.pcap"
    p.write_bytes((ref / "lat_plain.pcap").read_bytes()[:24])
    with pytest.raises(TestbedError, match="holds no packet"):
        analyse_run(plain_inputs(ref, p), export_chunks)


def test_not_a_capture(tmp_path: Path, ref: Path) -> None:
    p = tmp_path / "x.pcap"
    p.write_text("seq,t_send_us\n")
    with pytest.raises(TestbedError, match="not a pcap"):
        analyse_run(plain_inputs(ref, p), export_chunks)


def test_truncated_pcap_uses_complete_packets_and_says_how_much_was_cut(ref: Path, tmp_path: Path) -> None:
    data = (ref / "lat_plain.pcap").read_bytes()
    cut_at = 150_000
    p = tmp_path / "cut.pcap"
    p.write_bytes(data[:cut_at])
    # independent: where does the last complete record end?
    off = 24
    complete = 0
    while off + 16 <= cut_at:
        incl = struct.unpack_from("<I", data, off + 8)[0]
        if off + 16 + incl > cut_at:
            break
        off += 16 + incl
        complete += 1
    assert cut_at - off > 0  # the cut falls inside a record
    a = analyse_run(plain_inputs(ref, p), export_chunks)
    assert any(f"{cut_at - off} bytes" in w and "truncated" in w for w in a.metrics["warnings"])
    assert a.metrics["capture"]["packets"] == complete == len(walk_pcap(p))
    # 65-byte session is at the end: only some of its messages survived, counted as lost (no log)
    got = a.metrics["loss"]["received_unique"]
    assert 0 < got < 100 and a.metrics["loss"]["loss_pct"] == pytest.approx(100 - got)


def test_pcapng_gives_the_same_tables(ref: Path, tmp_path: Path) -> None:
    if shutil.which("editcap") is None:
        pytest.fail("editcap (wireshark-common, installed with tshark) is missing")
    import subprocess
    ng = tmp_path / "plain.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(ref / "lat_plain.pcap"), str(ng)], check=True)
    assert scan_capture(ng).fmt == "pcapng"
    assert scan_capture(ng).packets == scan_capture(ref / "lat_plain.pcap").packets
    a = analyse_run(plain_inputs(ref, ng), export_chunks)
    b = analyse_run(plain_inputs(ref, ref / "lat_plain.pcap"), export_chunks)
    pd.testing.assert_frame_equal(a.per_message, b.per_message)
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(ng.read_bytes()[:-7])
    s = scan_capture(cut)
    assert s.packets == scan_capture(ng).packets - 1 and s.truncated_bytes > 7


def _write_pcap(path: Path, source: Path, keep) -> int:
    data = source.read_bytes()
    out = bytearray(data[:24])
    off, kept = 24, 0
    frames = walk_pcap(source)
    for f in frames:
        incl = struct.unpack_from("<I", data, off + 8)[0]
        if keep(f):
            out += data[off: off + 16 + incl]
            kept += 1
        off += 16 + incl
    path.write_bytes(bytes(out))
    return kept


def test_capture_without_mqtt(ref: Path, tmp_path: Path) -> None:
    p = tmp_path / "nomqtt.pcap"
    kept = _write_pcap(p, ref / "lat_plain.pcap", lambda f: f.tcp_payload == 0)  # SYN/ACK/FIN only
    assert kept > 0
    with pytest.raises(TestbedError, match="no MQTT in them"):
        analyse_run(plain_inputs(ref, p), export_chunks)


def test_wrong_broker_port(ref: Path) -> None:
    with pytest.raises(TestbedError, match="no packet at all on that port"):
        analyse_run(plain_inputs(ref, ref / "lat_plain.pcap", broker_port=1884), export_chunks)


def test_wrong_payload_size(ref: Path) -> None:
    with pytest.raises(TestbedError, match="no PUBLISH of that size"):
        analyse_run(plain_inputs(ref, ref / "lat_plain.pcap", payload_bytes=64), export_chunks)


@pytest.fixture()
def crafted(ref: Path, tmp_path: Path) -> tuple[Path, Path, dict]:
    """Reference logs of lat_plain 65 B, with faults injected into the subscriber log."""
    pub, sub = convert_reference_csv(ref / "lat_plain_65.csv", tmp_path)
    lines = sub.read_text().splitlines()
    header, rows = lines[0], lines[1:]
    by_seq = {int(r.split(",")[0]): r for r in rows}
    order = [s for s in range(100) if s not in (10, 11, 99)]       # 10, 11 lost; 99 cut (see below)
    i30 = order.index(30)
    order[i30], order[i30 + 1] = 31, 30                             # one swap: 30 arrives after 31
    order.remove(50)
    order.insert(order.index(55) + 1, 50)                           # 50 arrives after 55
    out = []
    send = {int(r.split(",")[0]): int(r.split(",")[1]) for r in pub.read_text().splitlines()[1:]}
    for s in order:
        seq, t, n, dup = by_seq[s].split(",")
        if s == 60:
            t = str(send[60] - 500)                                 # received 0.5 ms before it was sent
        out.append(f"{seq},{t},{n},{dup}")
        if s == 20:
            out += [f"20,{int(t) + 7},{n},1", f"20,{int(t) + 9},{n},1"]  # two duplicates
    text = header + "\n" + "\n".join(out) + "\n" + "99,17960044"   # crash mid-line: no newline
    sub.write_text(text)
    return pub, sub, {"lost": 3, "duplicates": 2, "out_of_order": 2, "negative": 1}


def test_crafted_subscriber_log_is_counted_exactly(ref: Path, crafted: tuple) -> None:
    pub, sub, want = crafted
    a = analyse_run(plain_inputs(ref, ref / "lat_plain.pcap", publisher_log=pub, subscriber_log=sub), export_chunks)
    lo = a.metrics["loss"]
    assert lo["received_unique"] == 100 - want["lost"]
    assert lo["loss_pct"] == pytest.approx(want["lost"])
    assert lo["duplicates"] == want["duplicates"]
    assert lo["out_of_order"] == want["out_of_order"]
    assert lo["received_total"] == 100 - want["lost"] + want["duplicates"]
    assert a.metrics["delay_ms"]["negative_count"] == want["negative"]
    assert a.metrics["delay_ms"]["min"] == pytest.approx(-0.5)
    assert any("negative" in w for w in a.metrics["warnings"])
    assert any("no newline" in w for w in a.metrics["warnings"])
    pm = a.per_message.set_index("seq")
    assert pm.loc[20, "recv_count"] == 3 and pm.loc[20, "dup"] == 1
    assert pm.loc[10, "recv_count"] == 0 and pd.isna(pm.loc[10, "delay_ms"])
    assert pd.notna(pm.loc[10, "broker_in_us"])  # it was seen entering the broker
    # the study's loss counts every received line: (100 - 99) / 100
    assert a.metrics["study_compatible"]["loss_pct"] == pytest.approx(1.0)


def test_outputs_are_written_and_json_has_no_nan(ref: Path, crafted: tuple, tmp_path: Path) -> None:
    pub, sub, _ = crafted
    a = analyse_run(plain_inputs(ref, ref / "lat_plain.pcap", publisher_log=pub, subscriber_log=sub), export_chunks)
    out = tmp_path / "run"
    paths = write_run_outputs(a, out)
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "packets.csv", "per_message.csv"]
    m = json.loads(paths["metrics"].read_text())  # strict: NaN would not be valid JSON
    assert m["schema_version"] == 2 and m["inputs"]["payload_bytes"] == 65
    for key in ("delay_ms", "broker_transit_ms", "jitter_ms", "throughput", "loss", "overhead_bytes",
                "handshake", "tls", "study_compatible", "warnings"):
        assert key in m
    assert m["tls"]["version"] is None and m["overhead_bytes"]["tls_overhead"] is None
    pm = pd.read_csv(paths["per_message"])
    assert len(pm) == 100 and list(pm.columns[:3]) == ["seq", "t_send_us", "t_send_source"]
    assert len(pd.read_csv(paths["packets"])) == m["capture"]["packets"]


def test_loss_function_on_crafted_arrival_orders() -> None:
    log = pd.DataFrame({"seq": [0, 1, 3, 2, 2, 4, 9, 7, 12], "t_recv_us": 0, "bytes": 0, "dup": 0})
    got = loss(log, 10)
    assert got["received_unique"] == 7          # 0 1 2 3 4 7 9 (12 is outside 0..9)
    assert got["duplicates"] == 1               # the second 2
    assert got["out_of_order"] == 2             # 2 after 3, 7 after 9
    assert got["unexpected"] == 1
    assert got["loss_pct"] == pytest.approx(30.0)


def test_describe_and_jitter_against_hand_values() -> None:
    d = describe(np.array([1.0, 2.0, 4.0, -1.0]))
    assert d["n"] == 4 and d["mean"] == 1.5 and d["median"] == 1.5 and d["negative_count"] == 1
    sd = np.std([1.0, 2.0, 4.0, -1.0], ddof=1)
    assert d["std"] == pytest.approx(sd)
    half = 3.182446305284263 * sd / 2  # t(0.975, 3)
    assert (d["ci95_low"], d["ci95_high"]) == pytest.approx((1.5 - half, 1.5 + half))
    assert describe(np.array([]))["available"] is False
    one = describe(np.array([3.0]))
    assert one["std"] is None and one["ci95_low"] is None and one["mean"] == 3.0
    pm = pd.DataFrame({"seq": [2, 0, 1], "delay_ms": [5.0, 1.0, 2.0]})
    j = jitter(pm)
    assert j["mean_abs_diff"] == pytest.approx(2.0)  # |2-1| + |5-2| over 2


def test_log_reader_tolerates_header_absence_and_bad_lines(tmp_path: Path) -> None:
    p = tmp_path / "sub.csv"
    p.write_text("0,100,65,0\n1,x,65,0\n2,300,65,true\n3,400,65\n4,500,65,False\n")
    t = read_subscriber_log(p)
    assert list(t.frame["seq"]) == [0, 2, 4] and list(t.frame["dup"]) == [0, 1, 0]
    assert len(t.warnings) == 1 and "line 2, 4" in t.warnings[0]


def test_a_missing_publisher_log_line_falls_back_to_the_payload_time(ref: Path, tmp_path: Path) -> None:
    pub, sub = convert_reference_csv(ref / "lat_plain_65.csv", tmp_path)
    lines = pub.read_text().splitlines()
    pub.write_text("\n".join(line for line in lines if not line.startswith("42,")) + "\n")
    a = analyse_run(plain_inputs(ref, ref / "lat_plain.pcap", publisher_log=pub, subscriber_log=sub), export_chunks)
    pm = a.per_message.set_index("seq")
    assert pm.loc[42, "t_send_source"] == "payload" and pm.loc[41, "t_send_source"] == "publisher log"
    assert pd.notna(pm.loc[42, "delay_ms"]) and a.metrics["delay_ms"]["n"] == 100


def _records(pcap: Path) -> tuple[bytes, list[bytearray]]:
    data = pcap.read_bytes()
    recs, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        recs.append(bytearray(data[off: off + 16 + incl]))
        off += 16 + incl
    return data[:24], recs


def _first_publisher_publish(recs: list[bytearray], port: int = 1883) -> int:
    """Index of the first frame to the broker carrying a QoS 0 PUBLISH of 100 B (plain)."""
    for i, r in enumerate(recs):
        pkt = r[16:]
        if len(pkt) > 66 and struct.unpack_from("!H", pkt, 36)[0] == port and pkt[66] == 0x30 \
                and len(pkt) - 66 == 111:
            return i
    raise AssertionError("no PUBLISH frame")


def test_a_retransmission_filling_a_gap_is_counted_at_its_own_time(ref: Path, tmp_path: Path) -> None:
    """The publisher's segment reaches the capture late, after later ones (lost before the capture and
    resent, or held back by a reordering delay: one copy on the wire either way)."""
    header, recs = _records(ref / "lat_plain.pcap")
    i = _first_publisher_publish(recs[40:]) + 40
    moved = recs.pop(i)
    seq = int(bytes(moved[16 + 66 + 11: 16 + 66 + 19]))        # payload "%08d," after 11 B MQTT header
    later = recs[i + 6]
    sec, usec = struct.unpack_from("<II", later, 0)
    struct.pack_into("<II", moved, 0, sec, usec + 500)          # 0.5 ms after a later frame
    recs.insert(i + 7, moved)
    p = tmp_path / "gap.pcap"
    p.write_bytes(header + b"".join(recs))
    a = analyse_run(plain_inputs(ref, p, payload_bytes=100, samples_expected=200), export_chunks)
    pm = a.per_message.set_index("seq")
    assert len(pm) == 200 and pm["broker_in_us"].notna().all()
    assert pm.loc[seq, "broker_in_us"] == sec * 1_000_000 + usec + 500
    # its bytes were never carried before: not a resend by the capture's count (the rule until 2026-12
    # counted every segment below the highest seq seen, so reordered originals too)
    assert a.metrics["loss"]["tcp_retransmissions"] == 0


def test_a_duplicated_segment_is_a_retransmission_not_a_message(ref: Path, tmp_path: Path) -> None:
    header, recs = _records(ref / "lat_plain.pcap")
    i = _first_publisher_publish(recs[40:]) + 40
    recs.insert(i + 1, bytearray(recs[i]))
    p = tmp_path / "dup.pcap"
    p.write_bytes(header + b"".join(recs))
    a = analyse_run(plain_inputs(ref, p, payload_bytes=100, samples_expected=200), export_chunks)
    assert a.metrics["capture"]["publish_publisher_to_broker"] == 200
    assert a.metrics["loss"]["tcp_retransmissions"] == 1
    assert not any("repeat a sequence number" in w for w in a.metrics["warnings"])


def test_missing_tshark_is_a_clear_error(ref: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no tshark on the PATH
    with pytest.raises(TestbedError, match="program not found: tshark") as err:
        analyse_run(plain_inputs(ref, ref / "lat_plain.pcap"), export_chunks)
    assert "testbed doctor" in (err.value.hint or "")
