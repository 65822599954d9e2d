"""testbed compare A B (report/compare.py): cells matched by configuration or by a mapping, deltas B - A with the
in-bundle statistics, configurations in one bundle only, the manifests' differences named first."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import stats
from orchestrator.cli.main import main
from orchestrator.errors import TestbedError
from orchestrator.report.compare import compare_bundles
from orchestrator.report.loader import delay_samples, load_bundle
from orchestrator.report.values import num
from tests.unit.report.conftest import make_bundle

RESAMPLES = 1000
SHIFT_MS = 1.0  # added to every one-way delay of B's tls 65 B cell
EXTRA_BYTES = 8  # added to every frame of B's plain 100 B cell


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _edit_messages(run: Path, column: str, add: float) -> None:
    pm = pd.read_csv(run / "per_message.csv")
    pm[column] = pm[column] + add
    pm.to_csv(run / "per_message.csv", index=False)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A: the demo's 2 scenarios x 2 payloads. B: A's copy with tls 65 B 1 ms slower, plain 100 B 8 B heavier per
    frame, tls 100 B gone, a 200 B payload added, and a newer tool version and broker image in its manifest."""
    tmp = tmp_path_factory.mktemp("compare")
    a, b = tmp / "A", tmp / "B"
    make_bundle(a, seed=7)
    shutil.copytree(a, b)
    _edit_messages(b / "runs" / "tls-65B-none-r1", "delay_ms", SHIFT_MS)
    _edit_messages(b / "runs" / "plain-100B-none-r1", "frame_len", EXTRA_BYTES)
    shutil.rmtree(b / "runs" / "tls-100B-none-r1")
    make_bundle(tmp / "extra", payloads=(200,), scenarios=("plain",), seed=9)
    shutil.copytree(tmp / "extra" / "runs" / "plain-200B-none-r1", b / "runs" / "plain-200B-none-r1")
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["tool_version"] = "0.2.0"
    manifest["environment"]["image_digests"] = {"broker": "sha256:bbbb"}
    (b / "manifest.json").write_text(json.dumps(manifest))
    return a, b


@pytest.fixture(scope="module")
def compared(bundles: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out") / "cmp"
    written = compare_bundles(*bundles, out, resamples=RESAMPLES)
    assert sorted(p.name for p in written) == ["comparisons.csv", "report.html", "report.md"]
    return out


def _row(out: Path, config: str, metric: str) -> dict[str, str]:
    return next(r for r in _rows(out / "comparisons.csv") if r["config_a"] == config and r["metric"] == metric)


def test_cells_are_matched_by_configuration_and_the_rest_listed(compared: Path) -> None:
    configs = {r["config_a"] for r in _rows(compared / "comparisons.csv")}
    assert configs == {"plain 65 B none qos 0", "tls 65 B none qos 0", "plain 100 B none qos 0"}
    report = (compared / "report.md").read_text()
    only = report.split("## Cells in one bundle only", 1)[1].split("\n## ", 1)[0]
    assert "| A only | tls 100 B none qos 0 | tls-100B-none-r1 |" in only
    assert "| B only | plain 200 B none qos 0 | plain-200B-none-r1 |" in only


def test_the_known_changes_are_the_deltas(compared: Path, bundles: tuple[Path, Path]) -> None:
    delay = _row(compared, "tls 65 B none qos 0", "delay_ms")
    assert float(delay["delta_median"]) == pytest.approx(SHIFT_MS, abs=1e-9)
    assert float(delay["delta_mean"]) == pytest.approx(SHIFT_MS, abs=1e-9)
    assert float(delay["ci95_median_low"]) <= SHIFT_MS <= float(delay["ci95_median_high"])
    assert delay["cliffs_magnitude"] == "large" and float(delay["cliffs_delta"]) == 1.0
    a_cells = {c.record.cell_id: c for c in load_bundle(bundles[0]).cells}
    base = delay_samples(a_cells["tls-65B-none-r1"])
    expected = stats.compare_samples(base, base + SHIFT_MS, resamples=RESAMPLES, seed=1234)
    assert float(delay["mannwhitney_p"]) == pytest.approx(expected.mannwhitney_p, rel=1e-6)
    assert delay["bootstrap_seed"] == "1234"  # A's sweep seed
    frames = _row(compared, "plain 100 B none qos 0", "frame_len_bytes")
    assert float(frames["delta_median"]) == EXTRA_BYTES and frames["mean_a"] == "177"
    unchanged = _row(compared, "plain 65 B none qos 0", "delay_ms")
    assert float(unchanged["delta_median"]) == 0 and float(unchanged["cliffs_delta"]) == 0
    assert _row(compared, "tls 65 B none qos 0", "frame_len_bytes")["delta_median"] == "0"


def test_the_first_lines_name_what_differs_in_the_making(compared: Path) -> None:
    delay = _row(compared, "tls 65 B none qos 0", "delay_ms")
    head = "\n".join((compared / "report.md").read_text().splitlines()[:12])
    assert "Made differently: tool version, images (broker)." in head
    assert "| tool_version | 0.1.0 | 0.2.0 |" in head
    assert "| environment.image_digests.broker | n/a | sha256:bbbb |" in head
    headline = (compared / "report.md").read_text().split("## What changed from A to B", 1)[1].split("\n## ")[0]
    line = next(x for x in headline.splitlines() if x.startswith("| tls 65 B none qos 0 |"))
    low, high = (num(float(delay[k]), 3, True) for k in ("ci95_median_low", "ci95_median_high"))
    assert f"[+1.000 ms ({low} .. {high})](#all-compared-metrics)" in line and "large (+1.00)" in line
    html = (compared / "report.html").read_text()
    assert '<a id="all-compared-metrics"></a><h2>All compared metrics</h2>' in html


def test_a_mapping_pairs_other_configurations(bundles: tuple[Path, Path], tmp_path: Path) -> None:
    mapping = tmp_path / "map.yaml"
    mapping.write_text("tls-65B-none-r1: plain 65 B none qos 0\n")  # a cell id in A, a configuration in B
    compare_bundles(*bundles, tmp_path / "out", mapping=mapping, resamples=RESAMPLES)
    rows = _rows(tmp_path / "out" / "comparisons.csv")
    assert {(r["config_a"], r["config_b"]) for r in rows} == {("tls 65 B none qos 0", "plain 65 B none qos 0")}
    frames = next(r for r in rows if r["metric"] == "frame_len_bytes")
    assert float(frames["delta_median"]) == -21  # B's plain against A's tls: the TLS record's 21 B
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| A only | plain 65 B none qos 0 | plain-65B-none-r1 |" in report
    assert "| B only | tls 65 B none qos 0 | tls-65B-none-r1 |" in report
    mapping.write_text("tls-999B-none-r1: plain-65B-none-r1\n")
    with pytest.raises(TestbedError, match="neither a finished cell nor a configuration"):
        compare_bundles(*bundles, tmp_path / "out", mapping=mapping, resamples=RESAMPLES)


def test_the_command_writes_the_comparison(bundles: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cli"
    assert main(["compare", str(bundles[0]), str(bundles[1]), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"comparisons.csv", "report.md", "report.html"}
    assert np.isclose(float(_row(out, "tls 65 B none qos 0", "delay_ms")["delta_median"]), SHIFT_MS)
