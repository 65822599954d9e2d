"""The report names the delay mechanism of each impaired cell (impairment_state.delay_mechanism in cell.json),
says what the mechanism is, and stays byte-identical for bundles whose cells did not record it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.report import build_report
from orchestrator.report.impairment import mechanism_label, profile_text
from tests.unit.report.conftest import BundleFactory

RESAMPLES = 200
PROFILE = {"name": "wifi-good", "delay_ms": 5.0, "jitter_ms": 2.0, "distribution": "normal", "loss_pct": 0.1,
           "loss_correlation_pct": 0.0, "rate_kbit": None, "direction": "publisher->broker"}


def _set_cell(root: Path, cell_id: str, **fields: Any) -> None:
    path = root / "runs" / cell_id / "cell.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}), encoding="utf-8")


def _report(root: Path) -> str:
    build_report(root, resamples=RESAMPLES)
    return (root / "report.md").read_text(encoding="utf-8")


def _section(report: str) -> str:
    return report.split("## Impairment\n", 1)[1].split("\n## ", 1)[0]


def test_a_bundle_without_the_key_gets_the_same_report(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    before = _report(root)
    for cell_id in ("plain-65B-none-r1", "tls-65B-none-r1"):
        _set_cell(root, cell_id, impairment_state={"profile": "none", "applied": False, "note": "nothing applied"})
    assert _report(root) == before
    _set_cell(root, "tls-65B-none-r1", impairment="wifi-good",
              impairment_state={"profile": "wifi-good", "applied": True, "impairment": PROFILE})
    assert "## Impairment" not in _report(root)


def test_impaired_cells_name_their_mechanism_and_the_queue_is_explained(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65, 100))
    _set_cell(root, "plain-65B-none-r1", impairment_state={"profile": "none", "applied": False,
                                                           "delay_mechanism": None})
    _set_cell(root, "tls-65B-none-r1", impairment="wifi-good",
              impairment_state={"profile": "wifi-good", "applied": True, "delay_mechanism": "queue",
                                "impairment": PROFILE})
    _set_cell(root, "tls-100B-none-r1", impairment="lossy-1pct",
              impairment_state={"profile": "lossy-1pct", "applied": True, "delay_mechanism": None,
                                "impairment": {**PROFILE, "name": "lossy-1pct", "delay_ms": 0, "jitter_ms": 0,
                                               "loss_pct": 1.0}})
    section = _section(_report(root))
    assert "| tls-65B-none-r1 | ok | wifi-good | 5 ms +/- 2 ms (normal), 0.1 % loss | queue |" in section
    assert "| tls-100B-none-r1 | ok | lossy-1pct | 1 % loss | - |" in section
    assert "plain-65B-none-r1" not in section  # not impaired
    assert "queue: the userspace delay line (NFQUEUE) at a forwarding hop. A router container (router)" in section
    assert "FORWARD hook" in section and "broker's ingress, after the broker-side capture" in section
    assert "netem: the kernel's netem qdisc" not in section  # no cell used it
    html = (root / "report.html").read_text(encoding="utf-8")
    assert "<h2>Impairment</h2>" in html and "<td>queue</td>" in html


def test_labels_and_profiles_read_what_was_recorded() -> None:
    assert [mechanism_label(s) for s in ({"delay_mechanism": "netem"}, {"delay_mechanism": None},
                                         {"applied": False}, {"applied": True}, None)] == \
        ["netem", "-", "-", "n/a", "n/a"]
    congested = {**PROFILE, "delay_ms": 40.0, "jitter_ms": 20.0, "distribution": "paretonormal", "loss_pct": 2.0,
                 "loss_correlation_pct": 25.0, "rate_kbit": 5000, "direction": "both"}
    assert profile_text({"impairment": congested}) == \
        "40 ms +/- 20 ms (paretonormal), 2 % loss (25 % correlation), 5000 kbit/s, both"
    assert profile_text({"applied": False}) == "nothing applied" and profile_text(None) == "n/a"
