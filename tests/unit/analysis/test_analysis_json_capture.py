"""Our own payload format on the scenario's suite (0xCCA9), non-standard TLS port, recorded here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.analysis import RunInputs, analyse_run
from orchestrator.backends.tshark import export_chunks

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "analysis" / "json_t12_ecdsa_chacha"


def test_json_payloads_on_tls12_ecdsa_chacha20() -> None:
    a = analyse_run(RunInputs(pcap=FIX / "tls_capture.pcapng", broker_port=18883, tls=True,
                              samples_expected=40, payload_bytes=65,
                              keylogs=[FIX / "publisher.keys.log", FIX / "subscriber.keys.log"],
                              publisher_log=FIX / "publisher.csv", subscriber_log=FIX / "subscriber.csv",
                              expected_tls=("TLS 1.2", 0xCCA9)), export_chunks)
    pm = a.per_message
    assert list(pm["seq"]) == list(range(40))
    pub = pd.read_csv(FIX / "publisher.csv")
    assert list(pm["payload_t_send_us"]) == list(pub["t_send_us"])  # "t" read from the JSON payload
    assert (pm["tls_overhead"] == 21).all() and (pm["mqtt_len"] == 65 + 2 + 2 + len("bench/t")).all()
    assert a.metrics["tls"]["cipher_suite"] == "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    sub = pd.read_csv(FIX / "subscriber.csv")
    want = (sub.sort_values("seq")["t_recv_us"].to_numpy() - pub["t_send_us"].to_numpy()) / 1000
    assert (pm["delay_ms"].astype(float).to_numpy() == want).all()
    assert a.metrics["loss"]["loss_pct"] == 0 and a.metrics["delay_ms"]["negative_count"] == 0
