"""The report on real analysis output: the independent reference captures (paho + Mosquitto + OpenSSL).

The run analysis turns each capture into per_message.csv + metrics.json; the report must then show
the ground truth that the captures' README and CSVs give independently: 142 -> 163 B frames at
65 B payload (+21 B, RFC 7905) and the delay difference computed straight from the send/receive
stamps of the reference CSVs.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis.pipeline import RunInputs, analyse_run, write_run_outputs
from orchestrator.backends.tshark import export_chunks
from orchestrator.report import build_report

REPO = Path(__file__).resolve().parents[3]
VARIANTS = {"plain": ("lat_plain", 1883, None), "tls": ("lat_t12chacha", 8883, ("TLS 1.2", 0xCCA8))}
SAMPLES = {100: 200, 65: 100}  # payload -> messages of that session in the capture


def _reference_dir() -> Path:
    raw = os.environ.get("TESTBED_REFERENCE_CAPTURES")
    path = (Path(raw) if raw else REPO.parent / "shared" / "reference-captures").resolve()
    if not (path / "README.md").is_file():
        pytest.fail(f"reference captures not found at {path}: set TESTBED_REFERENCE_CAPTURES")
    return path


def _logs(src: Path, run: Path) -> tuple[Path, Path]:
    ref = pd.read_csv(src)
    pub, sub = run / "publisher.csv", run / "subscriber.csv"
    sent = pd.DataFrame({"seq": ref["seq"], "t_send_us": ref["send_ns"] // 1000, "bytes": ref["len"]})
    got = pd.DataFrame({"seq": ref["seq"], "t_recv_us": ref["recv_ns"] // 1000, "bytes": ref["len"]})
    got["dup"] = 0
    sent.to_csv(pub, index=False)
    got.to_csv(sub, index=False)
    return pub, sub


@pytest.fixture(scope="module")
def reference_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ref = _reference_dir()
    root = tmp_path_factory.mktemp("ref") / "20261130T030000Z-reference"
    for scenario, (name, port, expected) in VARIANTS.items():
        for payload, samples in SAMPLES.items():
            cell_id = f"{scenario}-{payload}B-none-r1"
            run = root / "runs" / cell_id
            run.mkdir(parents=True)
            pub, sub = _logs(ref / f"{name}_{payload}.csv", run)
            inputs = RunInputs(pcap=ref / f"{name}.pcap", broker_port=port, tls=expected is not None,
                               samples_expected=samples, payload_bytes=payload,
                               keylogs=[ref / f"{name}.keys.log"] if expected else [],
                               publisher_log=pub, subscriber_log=sub, expected_tls=expected)
            write_run_outputs(analyse_run(inputs, export_chunks), run)
            (run / "cell.json").write_text(json.dumps({
                "cell_id": cell_id, "scenario": scenario, "payload": payload, "impairment": "none",
                "repeat": 1, "status": "ok", "error": None}), encoding="utf-8")
    (root / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "created_utc": "2026-11-30T03:00:00Z", "command": "reference captures",
        "tool_version": "test", "git_commit": None, "seed": 5,
        "plan": {"publisher": "paho-mqtt reference capture"}, "environment": {}}), encoding="utf-8")
    build_report(root, resamples=2000)
    return root


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_wire_bytes_match_the_captures_ground_truth(reference_bundle: Path) -> None:
    summary = {r["cell_id"]: r for r in _rows(reference_bundle / "summary.csv")}
    assert summary["plain-65B-none-r1"]["frame_len"] == "142"
    assert summary["tls-65B-none-r1"]["frame_len"] == "163"
    assert summary["tls-65B-none-r1"]["tls_overhead"] == "21"
    assert summary["tls-65B-none-r1"]["cipher_suite_id"] == "0xcca8"
    comparisons = {(r["payload"], r["metric"]): r for r in _rows(reference_bundle / "comparisons.csv")}
    for payload in ("65", "100"):
        assert comparisons[(payload, "frame_len_bytes")]["delta_median"] == "21"


def test_delay_delta_matches_the_reference_stamps(reference_bundle: Path) -> None:
    ref = _reference_dir()
    comparisons = {(r["payload"], r["metric"]): r for r in _rows(reference_bundle / "comparisons.csv")}
    for payload in (65, 100):
        delays = {}
        for scenario, (name, _, _) in VARIANTS.items():
            table = pd.read_csv(ref / f"{name}_{payload}.csv")
            # microsecond stamps, as the logs carry them
            delays[scenario] = ((table["recv_ns"] // 1000) - (table["send_ns"] // 1000)).to_numpy() / 1000.0
        row = comparisons[(str(payload), "delay_ms")]
        expected = np.median(delays["tls"]) - np.median(delays["plain"])
        assert float(row["delta_median"]) == pytest.approx(expected, abs=1e-9)
        assert int(row["n_baseline"]) == SAMPLES[payload]


def test_handshake_only_in_tls_and_report_self_contained(reference_bundle: Path) -> None:
    summary = {r["cell_id"]: r for r in _rows(reference_bundle / "summary.csv")}
    assert summary["plain-65B-none-r1"]["tls_handshake_ms"] == "n/a"
    assert float(summary["tls-65B-none-r1"]["tls_handshake_ms"]) > 0
    html = (reference_bundle / "report.html").read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html
    assert html.count('src="data:image/png;base64,') == 5
