"""Behaviour kept across the wave-2 layout step: re-analyse every capture we keep and pin the outputs.

`python -m tests.golden.regenerate OUT` re-analyses the independent reference captures (every variant,
both payload sessions) and the fixture capture under tests/fixtures/analysis/, puts the runs into one
bundle and builds the derived files. tests/golden/expected/ holds what the code BEFORE the moves wrote;
tests/unit/test_behaviour_kept.py rebuilds the same bundle with today's code and compares the bytes of
metrics.json, per_message.csv, summary.csv and comparisons.csv.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from orchestrator.analysis.pipeline import RunInputs, analyse_run, write_run_outputs
from orchestrator.backends.tshark import export_chunks
from orchestrator.report import build_report

REPO = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).resolve().parent / "expected"
FIXTURE = REPO / "tests" / "fixtures" / "analysis" / "json_t12_ecdsa_chacha"
COMPARED = ("metrics.json", "per_message.csv")
COMPARED_BUNDLE = ("summary.csv", "comparisons.csv")
# reference variant -> (scenario name in the bundle, broker port, expected (version, suite))
REFERENCE = {
    "lat_plain": ("plain", 1883, None),
    "lat_t12chacha": ("t12chacha", 8883, ("TLS 1.2", 0xCCA8)),
    "lat_t13chacha": ("t13chacha", 8884, ("TLS 1.3", 0x1303)),
    "lat_t12aes": ("t12aes", 8885, ("TLS 1.2", 0xC02F)),
}
SESSIONS = {100: 200, 65: 100}  # payload -> messages of that session in each reference capture


def reference_dir() -> Path:
    raw = os.environ.get("TESTBED_REFERENCE_CAPTURES")
    return (Path(raw) if raw else REPO.parent / "shared" / "reference-captures").resolve()


def _reference_logs(src: Path, run: Path) -> tuple[Path, Path]:
    ref = pd.read_csv(src)
    pub, sub = run / "publisher.csv", run / "subscriber.csv"
    pd.DataFrame({"seq": ref["seq"], "t_send_us": ref["send_ns"] // 1000, "bytes": ref["len"]}).to_csv(
        pub, index=False)
    got = pd.DataFrame({"seq": ref["seq"], "t_recv_us": ref["recv_ns"] // 1000, "bytes": ref["len"]})
    got["dup"] = 0
    got.to_csv(sub, index=False)
    return pub, sub


def _cell(run: Path, scenario: str, payload: int) -> None:
    (run / "cell.json").write_text(json.dumps({
        "cell_id": run.name, "scenario": scenario, "payload": payload, "impairment": "none", "repeat": 1,
        "status": "ok", "error": None}), encoding="utf-8")


def build(root: Path) -> Path:
    """The bundle: one run per reference variant and payload, one for the fixture capture."""
    ref = reference_dir()
    for name, (scenario, port, expected) in REFERENCE.items():
        for payload, samples in SESSIONS.items():
            run = root / "runs" / f"{scenario}-{payload}B-none-r1"
            run.mkdir(parents=True)
            pub, sub = _reference_logs(ref / f"{name}_{payload}.csv", run)
            keys = ref / f"{name}.keys.log"
            inputs = RunInputs(pcap=ref / f"{name}.pcap", broker_port=port, tls=expected is not None,
                               samples_expected=samples, payload_bytes=payload,
                               keylogs=[keys] if expected else [], publisher_log=pub, subscriber_log=sub,
                               expected_tls=expected)
            write_run_outputs(analyse_run(inputs, export_chunks), run)
            _cell(run, scenario, payload)
    run = root / "runs" / "fixture-65B-none-r1"
    run.mkdir(parents=True)
    inputs = RunInputs(pcap=FIXTURE / "tls_capture.pcapng", broker_port=18883, tls=True, samples_expected=40,
                       payload_bytes=65, keylogs=[FIXTURE / "publisher.keys.log", FIXTURE / "subscriber.keys.log"],
                       publisher_log=FIXTURE / "publisher.csv", subscriber_log=FIXTURE / "subscriber.csv",
                       expected_tls=("TLS 1.2", 0xCCA9))
    write_run_outputs(analyse_run(inputs, export_chunks), run)
    _cell(run, "fixture", 65)
    (root / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "created_utc": "2026-12-01T00:00:00Z", "command": "golden outputs",
        "tool_version": "golden", "git_commit": None, "seed": 7, "plan": {"baseline": "plain"},
        "environment": {}}), encoding="utf-8")
    build_report(root, baseline="plain", resamples=500)
    return root


def compared_files(root: Path) -> list[Path]:
    """Relative paths of every compared file of a built bundle."""
    rels = [Path(n) for n in COMPARED_BUNDLE]
    for run in sorted((root / "runs").iterdir()):
        rels += [run.relative_to(root) / n for n in COMPARED]
    return rels


def main(argv: list[str]) -> int:
    """Rebuild the bundle in a temporary folder and copy its compared files to OUT (default: expected/)."""
    out = Path(argv[0]) if argv else EXPECTED
    with tempfile.TemporaryDirectory() as tmp:
        built = build(Path(tmp) / "bundle")
        rels = compared_files(built)
        for rel in rels:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built / rel, out / rel)
    print(f"{len(rels)} files written under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
