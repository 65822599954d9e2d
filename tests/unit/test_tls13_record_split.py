"""A TLS 1.3 record's overhead split into header, inner content type, tag and padding (analysis/tlsrecords.py), on
real captures: the virtual device on mbedTLS 3.6 (granularity 16, its own summary says so) against Mosquitto, the
reference captures' OpenSSL client (no padding), and TLS 1.2 runs (no split: their metrics.json is unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.analysis import tlsrecords
from orchestrator.analysis.pipeline import RunInputs, analyse_run
from orchestrator.backends.tshark import export_chunks
from orchestrator.report.figures import _layers
from orchestrator.results.bundle import Cell
from tests.golden import regenerate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "analysis"
TLS13 = FIXTURES / "tls13_mbedtls36"
PORT = 56893  # the loopback Mosquitto's port when the fixture was recorded


def device_run(payload: int) -> dict:
    inputs = RunInputs(pcap=TLS13 / "tls13_65_100.pcapng", broker_port=PORT, tls=True, samples_expected=6,
                       payload_bytes=payload, keylogs=[TLS13 / "p65" / "keys.log", TLS13 / "p100" / "keys.log"],
                       publisher_log=TLS13 / f"p{payload}" / "publisher.csv", expected_tls=("TLS 1.3", 0x1303))
    return analyse_run(inputs, export_chunks).metrics


@pytest.fixture(scope="module")
def device_runs() -> dict[int, dict]:
    return {p: device_run(p) for p in (65, 100)}


@pytest.mark.parametrize(("payload", "mqtt", "padding"), [(65, 84, 11), (100, 119, 8)])
def test_the_36_devices_records_split(device_runs: dict[int, dict], payload: int, mqtt: int, padding: int) -> None:
    over = device_runs[payload]["overhead_bytes"]
    split = over["tls13_record"]
    assert (over["mqtt_len"], split["records"]) == (mqtt, 6)
    assert (split["header"], split["inner_content_type"], split["tag"]) == (5, 1, 16)
    assert split["padding"] == padding and split["padding_values"] == [padding]
    assert split["padding_by_mqtt_len"] == {str(mqtt): padding}
    # the parts add up to what the wire carries per record
    assert split["header"] + split["inner_content_type"] + split["tag"] + split["padding"] == over["tls_overhead"]
    assert over["tls_overhead"] == {65: 33, 100: 30}[payload]
    assert split["padding_granularity"] is None  # not the analysis' to guess: the device says it


def test_the_granularity_is_the_devices_and_checked_against_the_wire(device_runs: dict[int, dict]) -> None:
    summary = json.loads((TLS13 / "p65" / "summary.json").read_text())
    assert summary["tls_library"].startswith("Mbed TLS 3.6.") and summary["tls13_padding_granularity"] == 16
    for metrics in device_runs.values():
        m = json.loads(json.dumps(metrics))
        tlsrecords.with_granularity(m, summary["tls13_padding_granularity"], "the device's summary")
        split = m["overhead_bytes"]["tls13_record"]
        assert (split["padding_granularity"], split["padding_as_granularity_implies"]) == (16, True)
        assert split["padding_granularity_source"] == "the device's summary"
        wrong = json.loads(json.dumps(metrics))
        tlsrecords.with_granularity(wrong, 1, "a claim the wire contradicts")
        assert wrong["overhead_bytes"]["tls13_record"]["padding_as_granularity_implies"] is False
        unsaid = json.loads(json.dumps(metrics))
        tlsrecords.with_granularity(unsaid, None, "a 2.28 device: no TLS 1.3")
        assert unsaid["overhead_bytes"]["tls13_record"]["padding_granularity"] is None


def test_implied_padding() -> None:
    assert [tlsrecords.implied_padding(m, 16) for m in (84, 119, 111, 76, 15)] == [11, 8, 0, 3, 0]
    assert {tlsrecords.implied_padding(m, 1) for m in range(1, 300)} == {0}


def test_openssl_client_pads_nothing_and_tls12_runs_have_no_split() -> None:
    ref = regenerate.reference_dir()
    if not (ref / "README.md").is_file():
        pytest.fail(f"reference captures not found at {ref}: set TESTBED_REFERENCE_CAPTURES")
    runs = {name: analyse_run(RunInputs(pcap=ref / f"{name}.pcap", broker_port=port, tls=True, samples_expected=100,
                                        payload_bytes=65, keylogs=[ref / f"{name}.keys.log"]), export_chunks).metrics
            for name, port in (("lat_t13chacha", 8884), ("lat_t12chacha", 8883))}
    split = runs["lat_t13chacha"]["overhead_bytes"]["tls13_record"]
    assert (split["records"], split["tag"], split["padding_values"]) == (100, 16, [0])
    assert runs["lat_t13chacha"]["overhead_bytes"]["tls_overhead"] == 22
    assert "tls13_record" not in runs["lat_t12chacha"]["overhead_bytes"]
    assert runs["lat_t12chacha"]["overhead_bytes"]["tls_overhead"] == 21


def test_the_plot_draws_padding_as_its_own_layer(device_runs: dict[int, dict]) -> None:
    from orchestrator.model.cell import CellRecord
    record = CellRecord.model_validate({"cell_id": "tls13-65B", "scenario": "tls13-chacha20", "payload": 65,
                                        "status": "ok"})
    bar = _layers("x", [Cell(record, Path("c"), metrics=device_runs[65])])
    assert bar is not None
    layers = bar[1]
    assert (layers["tls"], layers["tls_padding"]) == (22, 11)  # header + type + tag, then padding
    assert sum(layers[k] for k in ("tls", "tls_padding", "mqtt_header", "payload")) == 33 + 84


def test_the_cell_records_the_devices_granularity(tmp_path: Path) -> None:
    """cell.json's device block, which runanalysis/analyse.py hands to with_granularity, is the device's summary's."""
    import shutil

    from orchestrator.model.layout import Layout
    from orchestrator.model.run import RunSpec
    from orchestrator.publishers.variants import variant_for

    lay = Layout(tmp_path)
    lay.publisher_summary.parent.mkdir(parents=True)
    spec = RunSpec(scenario="tls13-chacha20", samples=6, device_stack="mbedtls-3.6")
    for summary, granularity in ((TLS13 / "p65" / "summary.json", 16),
                                 (FIXTURES / "tls12_device_stacks" / "mbedtls228" / "p65" / "summary.json", None)):
        shutil.copyfile(summary, lay.publisher_summary)
        assert variant_for(spec).recorded(lay)["device"]["tls13_padding_granularity"] == granularity
