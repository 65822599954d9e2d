"""The report's headline (report/headline.py): every figure read from the bundle's comparisons and metrics, linked
to the section of its table; n/a with its reason; lifecycle and fleet lines where such cells exist."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from orchestrator.report import build_report, headline, lifecycle
from orchestrator.report.lifecycle import Cost
from orchestrator.report.values import num
from tests.unit.report.conftest import BundleFactory
from tests.unit.report.test_fleet_report import add_fleet_cell

RESAMPLES = 1000


def _section(root: Path) -> str:
    report = (root / "report.md").read_text(encoding="utf-8").replace("\u00a0", " ")  # no-break spaces as spaces
    return report.split(f"## {headline.TITLE}\n", 1)[1].split("\n## ", 1)[0]


def _comparisons(root: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (root / "comparisons.csv").open(encoding="utf-8", newline="") as handle:
        return {(r["payload"], r["metric"]): r for r in csv.DictReader(handle)}


def _table_row(section: str, payload: int) -> list[str]:
    line = next(x for x in section.splitlines() if x.startswith(f"| {payload} B | tls |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_the_figures_are_the_comparisons_and_link_to_their_tables(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory()
    build_report(root, resamples=RESAMPLES)
    section, rows = _section(root), _comparisons(root)
    link = "(#comparisons-against-the-baseline-plain)"
    for payload in (65, 100):
        cells = _table_row(section, payload)
        assert len(cells) == len(headline.COLUMNS)
        frames, delay = rows[(str(payload), "frame_len_bytes")], rows[(str(payload), "delay_ms")]
        pct = num(float(frames["delta_median_pct"]), 1, True)
        assert cells[2] == f"[+21 B ({pct} %)]{link}"
        shown = re.fullmatch(r"\[([-+.\d]+) ms \(([-+.\d]+) \.\. ([-+.\d]+)\)\]" + re.escape(link), cells[3])
        assert shown is not None, cells[3]
        for text, key in zip(shown.groups(), ("delta_median", "ci95_median_low", "ci95_median_high"), strict=True):
            assert float(text) == pytest.approx(float(delay[key]), abs=0.0005 + 1e-9)  # 3 decimals shown
        assert cells[4] == f"[{delay['cliffs_magnitude']} ({float(delay['cliffs_delta']):+.2f})]{link}"
        hs = rows[(str(payload), "tls_handshake_ms")]
        added = sum(float(rows[(str(payload), m)]["delta_mean"])
                    for m in ("handshake_bytes_c2s", "handshake_bytes_s2c"))
        assert cells[5] == f"[{num(float(hs['scenario_mean']), 2)} ms, {num(added, 0, True)} B]{link}"
        assert cells[7] == "n/a [1]" and "[1] broker CPU per handshake is measured only in fleet cells" in section
        assert "(#the-study-vs-this-run)" in cells[8]
    assert "[+16 B; +2.85 ms (+2.45 %) 'delay'](#the-study-vs-this-run)" in section  # the study's 65 B numbers
    assert "- 65 B, tls vs plain: [+21 B" in section  # the words, before the table


def test_unavailable_delay_is_na_with_the_reason(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    for cell in ("plain-65B-none-r1", "tls-65B-none-r1"):
        path = root / "runs" / cell / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["delay_ms"] = {"available": False, "reason": "clock bound 3 ms exceeds a quarter of the uplink"}
        path.write_text(json.dumps(metrics), encoding="utf-8")
    build_report(root, resamples=RESAMPLES)
    section = _section(root)
    cells = _table_row(section, 65)
    assert cells[3] == "n/a [1]" and cells[4] == "n/a [1]"
    assert "[1] one-way delay not available: clock bound 3 ms exceeds a quarter of the uplink" in section


def test_no_baseline_no_figures_but_the_reason(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    build_report(root, baseline="tls13", resamples=RESAMPLES)
    assert "No scenario could be compared with the baseline 'tls13' (finished scenarios: plain, tls)" in _section(root)


def test_lifecycle_costs_and_fleet_lines(bundle_factory: BundleFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = Cost(65, "none", "plain", "plain", fixed=600.0, per_reading=130.0)
    full = Cost(65, "none", "tls", "full handshake", fixed=2400.0, per_reading=170.0)
    monkeypatch.setattr(lifecycle, "costs", lambda groups: [plain, full])
    root, _ = bundle_factory(payloads=(65,))
    add_fleet_cell(root, 1, 1.0 + np.random.default_rng(3).gamma(2.0, 0.1, 200), lost=1)
    build_report(root, resamples=RESAMPLES)
    section = _section(root)
    line = next(x for x in section.splitlines() if x.startswith("| 65 B | tls | full handshake |"))
    expected = [f"[{full.at(k):,.0f}](#connection-lifecycle)" for k in lifecycle.K_SHOWN]
    assert line == f"| 65 B | tls | full handshake | {' | '.join(expected)} | [{lifecycle.break_even(full, plain)}]" \
                   "(#connection-lifecycle) |"
    fleet_line = next(x for x in section.splitlines() if x.startswith("| tls-65B-none-2dev-r1 |"))
    assert "2 devices, 199 of 200 delivered" in fleet_line and "broker CPU 72.1 us per message, 12.80 ms per " \
        "handshake" in fleet_line and fleet_line.endswith("](#fleet) |")
