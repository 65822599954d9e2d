"""Ground truth from the independent reference captures (paho + Mosquitto + tcpdump, not this product)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from analysis_helpers import SAMPLES, VARIANTS, convert_reference_csv, reference_rows, walk_pcap

from orchestrator.analysis import RunInputs, analyse_run
from orchestrator.backends.tshark import export_chunks
from orchestrator.errors import TestbedError

# RFC 7905 (5 + 16), RFC 8446 (5 + 16 + 1 inner type), RFC 5288 (5 + 8 explicit nonce + 16)
RFC_TLS_OVERHEAD = {"plain": None, "t12chacha": 21, "t13chacha": 22, "t12aes": 29}
MQTT_LEN = {100: 111, 65: 76}  # README: topic of 7 bytes
FRAME_LEN_65 = {"plain": 142, "t12chacha": 163, "t13chacha": 164, "t12aes": 171}
SUITE_ID = {"t12chacha": "0xcca8", "t13chacha": "0x1303", "t12aes": "0xc02f"}

_cache: dict[tuple[str, int], object] = {}


def analyse(ref: Path, tmp: Path, variant: str, size: int, **over: object):
    key = (variant, size)
    if key in _cache and not over:
        return _cache[key]
    port, tls, keylog, expected = VARIANTS[variant]
    pub, sub = convert_reference_csv(ref / f"lat_{variant}_{size}.csv", tmp)
    args = dict(pcap=ref / f"lat_{variant}.pcap", broker_port=port, tls=tls, samples_expected=SAMPLES[size],
                payload_bytes=size, keylogs=[ref / keylog] if keylog else [], publisher_log=pub,
                subscriber_log=sub, expected_tls=expected)
    args.update(over)
    result = analyse_run(RunInputs(**args), export_chunks)
    if not over:
        _cache[key] = result
    return result


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("size", [100, 65])
def test_every_publish_has_the_rfc_sizes(ref: Path, tmp_path: Path, variant: str, size: int) -> None:
    a = analyse(ref, tmp_path, variant, size)
    pm = a.per_message
    assert len(pm) == SAMPLES[size]
    assert (pm["mqtt_len"] == MQTT_LEN[size]).all()
    assert (pm["payload_len"] == size).all()
    if RFC_TLS_OVERHEAD[variant] is None:
        assert pm["tls_record_len"].isna().all()
        assert a.metrics["overhead_bytes"]["tls_overhead"] is None
    else:
        assert (pm["tls_overhead"] == RFC_TLS_OVERHEAD[variant]).all()
        assert a.metrics["overhead_bytes"]["tls_overhead_values"] == [RFC_TLS_OVERHEAD[variant]]
        assert a.metrics["overhead_bytes"]["per_layer"]["tls"] == RFC_TLS_OVERHEAD[variant]
    layers = a.metrics["overhead_bytes"]["per_layer"]
    # the layers of a PUBLISH alone in its frame add up to the frame
    assert sum(layers.values()) == a.metrics["overhead_bytes"]["frame_len"]
    assert layers["ethernet"] == 14 and layers["payload"] == size


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_frame_size_at_65_bytes(ref: Path, tmp_path: Path, variant: str) -> None:
    a = analyse(ref, tmp_path, variant, 65)
    alone = a.per_message[a.per_message["msgs_in_frame"] == 1]
    assert len(alone) > 0
    assert (alone["frame_len"] == FRAME_LEN_65[variant]).all()
    assert a.metrics["overhead_bytes"]["frame_len"] == FRAME_LEN_65[variant]


@pytest.mark.parametrize("variant", ["t12chacha", "t13chacha", "t12aes"])
def test_negotiated_suite_from_serverhello(ref: Path, tmp_path: Path, variant: str) -> None:
    a = analyse(ref, tmp_path, variant, 100)
    tls = a.metrics["tls"]
    assert tls["cipher_suite_id"] == SUITE_ID[variant]
    assert tls["version"] == VARIANTS[variant][3][0]
    assert len(tls["sessions"]) == 4  # two sessions of publisher + subscriber in each capture
    assert {s["cipher_suite_id"] for s in tls["sessions"]} == {SUITE_ID[variant]}
    hs = a.metrics["handshake"]
    assert hs["tls_handshake_ms"] > 0 and hs["tcp_connect_ms"] > 0 and hs["mqtt_connect_ms"] > 0
    # the handshake carries the server certificate: kilobytes from the server, less from the client
    assert hs["bytes_server_to_client"] > hs["bytes_client_to_server"] > 0


def test_suite_mismatch_fails_with_both_names(ref: Path, tmp_path: Path) -> None:
    with pytest.raises(TestbedError) as err:
        analyse(ref, tmp_path, "t12chacha", 65, expected_tls=("TLS 1.2", 0xCCA9))
    msg = str(err.value)
    assert "0xcca8" in msg and "0xcca9" in msg and "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" in msg


def test_version_mismatch_fails(ref: Path, tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="TLS 1.3"):
        analyse(ref, tmp_path, "t13chacha", 65, expected_tls=("1.2", 0x1303))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_throughput_equals_an_independent_pcap_walk(ref: Path, tmp_path: Path, variant: str) -> None:
    for size in (100, 65):
        a = analyse(ref, tmp_path, variant, size)
        th = a.metrics["throughput"]
        port = VARIANTS[variant][0]
        t0 = round(th["first_publish_time"] * 1e6)
        t1 = round(th["last_publish_time"] * 1e6)
        frames = [f for f in walk_pcap(ref / f"lat_{variant}.pcap") if t0 <= f.t_us <= t1]
        senders = {f.src_port for f in frames if f.dst_port == port and f.tcp_payload > 0}
        assert len(senders) == 1  # one publisher per session in these captures
        wire = sum(f.orig_len for f in frames if f.dst_port == port and f.src_port in senders)
        assert th["wire_bytes"] == pytest.approx(wire, rel=1e-3)
        assert th["wire_bps"] == pytest.approx(wire * 8 / ((t1 - t0) / 1e6), rel=1e-3)
        assert th["payload_bytes"] == size * SAMPLES[size]


@pytest.mark.parametrize("variant", ["plain", "t12chacha"])
def test_delays_equal_the_reference_logs(ref: Path, tmp_path: Path, variant: str) -> None:
    a = analyse(ref, tmp_path, variant, 100)
    rows = reference_rows(ref / f"lat_{variant}_100.csv")
    want = np.array([(r["recv_ns"] // 1000 - r["send_ns"] // 1000) / 1000 for r in rows])
    got = a.per_message.sort_values("seq")["delay_ms"].astype(float).to_numpy()
    assert np.allclose(got, want, atol=1e-9)
    d = a.metrics["delay_ms"]
    assert d["n"] == len(rows) and d["negative_count"] == 0
    assert d["mean"] == pytest.approx(want.mean()) and d["median"] == pytest.approx(np.median(want))
    assert d["ci95_low"] < d["mean"] < d["ci95_high"]
    loss = a.metrics["loss"]
    got_loss = (loss["received_unique"], loss["loss_pct"], loss["duplicates"], loss["out_of_order"])
    assert got_loss == (200, 0, 0, 0)
    # broker transit: capture times in, then out, of the same message
    pm = a.per_message
    assert (pm["broker_out_us"] > pm["broker_in_us"]).all()
    assert a.metrics["broker_transit_ms"]["n"] == 200
    assert ((pm["t_send_us"] <= pm["broker_in_us"]) & (pm["broker_out_us"] <= pm["t_recv_us"])).all()


def test_without_publisher_log_send_time_comes_from_the_payload(ref: Path, tmp_path: Path) -> None:
    a = analyse(ref, tmp_path, "t13chacha", 65, publisher_log=None)
    rows = reference_rows(ref / "lat_t13chacha_65.csv")
    assert list(a.per_message["t_send_us"]) == [r["send_ns"] // 1000 for r in rows]
    assert set(a.per_message["t_send_source"]) == {"payload"}


@pytest.mark.parametrize("variant", ["t12chacha", "t13chacha", "t12aes"])
def test_without_key_log_messages_are_matched_by_order(ref: Path, tmp_path: Path, variant: str) -> None:
    decrypted = analyse(ref, tmp_path, variant, 65)
    blind = analyse(ref, tmp_path, variant, 65, keylogs=[])  # the suite is still checked from ServerHello
    assert blind.metrics["capture"]["messages_matched_by"].startswith("order")
    assert any("BY ORDER" in w for w in blind.metrics["warnings"])
    cols = ["seq", "broker_in_us", "broker_out_us", "tls_record_len", "t_send_us", "t_recv_us"]
    assert blind.per_message[cols].equals(decrypted.per_message[cols])
    assert blind.metrics["broker_transit_ms"] == decrypted.metrics["broker_transit_ms"]
    assert blind.metrics["throughput"]["wire_bytes"] == decrypted.metrics["throughput"]["wire_bytes"]
    assert blind.metrics["overhead_bytes"]["tls_overhead"] is None  # MQTT length unknown without keys
    assert blind.metrics["tls"]["cipher_suite_id"] == SUITE_ID[variant]


def test_a_wrong_key_log_is_the_same_as_none(ref: Path, tmp_path: Path) -> None:
    wrong = analyse(ref, tmp_path, "t12chacha", 100, keylogs=[ref / "lat_t12aes.keys.log"])
    assert wrong.metrics["capture"]["messages_matched_by"].startswith("order")
    assert wrong.metrics["loss"]["received_unique"] == 200


def test_unsynchronised_clocks_give_no_delay_number(ref: Path, tmp_path: Path) -> None:
    a = analyse(ref, tmp_path, "plain", 65, clocks_shared=False)
    d = a.metrics["delay_ms"]
    assert d["available"] is False and d["mean"] is None and d["reason"]
    assert a.metrics["broker_transit_ms"]["available"] is True  # one clock: still valid


def test_study_compatible_interarrival(ref: Path, tmp_path: Path) -> None:
    a = analyse(ref, tmp_path, "plain", 100)
    sc = a.metrics["study_compatible"]
    # 200 messages at 10 msg/s: the inter-arrival time is ~100 ms, far from the ~0.6 ms one-way delay
    assert sc["mean_interarrival_ms"] == pytest.approx(100, rel=0.05)
    assert "NOT one-way delay" in sc["note"]
    assert sc["loss_pct"] == 0
