"""The 98,504-packet reference capture: every one of its 50,000 PUBLISH is counted, none lost to packing."""

from __future__ import annotations

from pathlib import Path

from orchestrator.analysis import RunInputs, analyse_run
from orchestrator.analysis.fields import ExportRequest, parse_fields
from orchestrator.analysis.messages import PUBLISH, explode_mqtt
from orchestrator.backends.tshark import export_chunks, export_fields


def test_all_50000_publish_counted(ref: Path) -> None:
    pcap, keys = ref / "bench_plain_and_t12chacha.pcap", ref / "bench_plain_and_t12chacha.keys.log"
    packets = parse_fields(export_fields(ExportRequest(pcap, broker_port=8883, tls=True, keylogs=(keys,))))
    assert len(packets) == 98_504
    msgs = explode_mqtt(packets)
    pub = msgs[msgs["mqtt_type"] == PUBLISH]
    assert len(pub) == 50_000
    packed = pub[pub["msgs_in_frame"] > 1]
    assert len(packed) > 700 and packed["msgs_in_frame"].max() > 50  # README: ~1.5 %, dozens per segment
    for port in (1883, 8883):
        for direction in ("dst_port", "src_port"):
            for size in (65, 100):
                leg = pub[(pub[direction] == port) & (pub["payload_len"] == size)]
                assert sorted(leg["seq"]) == list(range(6250)), (port, direction, size)
    tls_pub = pub[(pub["dst_port"] == 8883) | (pub["src_port"] == 8883)]
    assert set(tls_pub["tls_record_len"] + 5 - tls_pub["mqtt_len"]) == {21}


def test_one_run_of_the_bench_capture(ref: Path) -> None:
    a = analyse_run(RunInputs(pcap=ref / "bench_plain_and_t12chacha.pcap", broker_port=8883, tls=True,
                              samples_expected=6250, payload_bytes=100,
                              keylogs=[ref / "bench_plain_and_t12chacha.keys.log"],
                              expected_tls=("TLS 1.2", 0xCCA8)), export_chunks)
    lo = a.metrics["loss"]
    assert (lo["received_unique"], lo["duplicates"], lo["out_of_order"]) == (6250, 0, 0)
    assert lo["source"] == "capture (broker->subscriber)"
    assert a.metrics["broker_transit_ms"]["n"] == 6250
    assert a.metrics["delay_ms"]["available"] is False  # no subscriber log: no number invented
