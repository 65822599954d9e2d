"""build_report on synthetic bundles: files, self-contained HTML, determinism, failed cells, values."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from orchestrator.analysis import stats
from orchestrator.errors import TestbedError
from orchestrator.report import build_report
from tests.unit.report.conftest import BundleFactory, Generated, make_bundle

Built = tuple[Path, Generated, list[Path]]
RESAMPLES = 2000  # enough for the tests, keeps them fast
PLOTS = {"delay_cdf.png", "delay_box.png", "wire_bytes_by_layer.png", "throughput.png", "handshake.png"}
DERIVED = ("summary.csv", "comparisons.csv", "report.md", "report.html")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The default 2 scenarios x 2 payloads bundle, reported once for the read-only tests."""
    root = tmp_path_factory.mktemp("built") / "20261130T020000Z-demo"
    generated = make_bundle(root)
    return root, generated, build_report(root, resamples=RESAMPLES)


def _derived_bytes(root: Path) -> dict[str, bytes]:
    files = [root / name for name in DERIVED] + sorted((root / "plots").glob("*.png"))
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_every_derived_file_is_written(built: Built) -> None:
    root, _, written = built
    names = {str(p.relative_to(root)) for p in written}
    assert names == set(DERIVED) | {f"plots/{p}" for p in PLOTS}
    for path in written:
        assert path.stat().st_size > 0
    assert not list(root.rglob("*.tmp")), "temporary files left behind"
    for png in (root / "plots").glob("*.png"):
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_report_html_is_self_contained(built: Built) -> None:
    root, _, _ = built
    html = (root / "report.html").read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html
    # data: URIs and links to the report's own sections (#...) only
    assert not re.search(r"""(?:href|src)\s*=\s*["'](?!data:|#)""", html), "reference to an outside file"
    assert "<link" not in html and "<script" not in html
    images = re.findall(r'<img [^>]*src="data:image/png;base64,', html)
    assert len(images) == len(PLOTS)
    assert "<style>" in html


def test_building_twice_gives_identical_bytes(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory()
    build_report(root, resamples=RESAMPLES)
    first = _derived_bytes(root)
    for name in DERIVED:
        (root / name).unlink()
    shutil.rmtree(root / "plots")
    build_report(root, resamples=RESAMPLES)
    assert _derived_bytes(root) == first


def test_same_data_in_another_folder_gives_same_csv(bundle_factory: BundleFactory) -> None:
    a, _ = bundle_factory(seed=3)
    b, _ = bundle_factory(seed=3)
    build_report(a, resamples=RESAMPLES)
    build_report(b, resamples=RESAMPLES)
    for name in ("summary.csv", "comparisons.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    for png in PLOTS:
        assert (a / "plots" / png).read_bytes() == (b / "plots" / png).read_bytes()


def test_png_carries_no_software_or_time_metadata(built: Built) -> None:
    root, _, _ = built
    data = (root / "plots" / "delay_cdf.png").read_bytes()
    assert b"Software" not in data and b"matplotlib" not in data.lower()
    assert b"tIME" not in data


def test_failed_and_interrupted_cells_are_listed_and_excluded(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(failed=["tls-100B-none-r1"], interrupted=["plain-100B-none-r1"])
    build_report(root, resamples=RESAMPLES)
    summary = {r["cell_id"]: r for r in _rows(root / "summary.csv")}
    assert len(summary) == 4
    assert summary["tls-100B-none-r1"]["status"] == "failed"
    assert summary["tls-100B-none-r1"]["error"] == "broker container exited (137) mid-cell"
    assert summary["plain-100B-none-r1"]["status"] == "interrupted"
    assert summary["tls-100B-none-r1"]["delay_mean_ms"] == "n/a"
    assert summary["tls-100B-none-r1"]["tiphon_index"] == "n/a"
    comparisons = _rows(root / "comparisons.csv")
    assert comparisons and {r["payload"] for r in comparisons} == {"65"}
    report = (root / "report.md").read_text(encoding="utf-8")
    excluded = report.split("## Excluded cells", 1)[1].split("\n## ", 1)[0]
    assert "tls-100B-none-r1 | failed | broker container exited (137) mid-cell" in excluded
    assert "plain-100B-none-r1 | interrupted | SIGINT" in excluded
    grades = report.split("## QoS grades", 1)[1].split("\n## ", 1)[0]
    assert "100B" not in grades


def test_run_folder_without_cell_json_is_listed_as_incomplete(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory()
    (root / "runs" / "tls-200B-none-r1").mkdir()
    build_report(root, resamples=RESAMPLES)
    report = (root / "report.md").read_text(encoding="utf-8")
    assert "tls-200B-none-r1 | incomplete | no cell.json" in report


def test_delay_comparison_matches_stats_on_the_generated_samples(built: Built) -> None:
    root, generated, _ = built
    rows = {(r["payload"], r["metric"]): r for r in _rows(root / "comparisons.csv")}
    row = rows[("65", "delay_ms")]
    base, scen = generated["plain-65B-none-r1"]["delay"], generated["tls-65B-none-r1"]["delay"]
    expected = stats.compare_samples(base, scen, resamples=RESAMPLES, seed=1234)
    assert row["baseline"] == "plain" and row["scenario"] == "tls"
    assert float(row["delta_mean"]) == pytest.approx(scen.mean() - base.mean(), rel=1e-9)
    assert float(row["delta_median"]) == pytest.approx(np.median(scen) - np.median(base), rel=1e-9)
    assert float(row["delta_mean_pct"]) == pytest.approx(100 * (scen.mean() / base.mean() - 1), rel=1e-9)
    assert float(row["ci95_mean_low"]) == pytest.approx(expected.ci_mean_low, rel=1e-9)
    assert float(row["welch_p"]) == pytest.approx(expected.welch_p, rel=1e-6)
    assert float(row["mannwhitney_p"]) == pytest.approx(expected.mannwhitney_p, rel=1e-6)
    assert float(row["cliffs_delta"]) == pytest.approx(expected.cliffs_delta)
    assert row["bootstrap_seed"] == "1234"  # the sweep's seed from manifest.json
    assert row["bootstrap_resamples"] == str(RESAMPLES)
    assert int(row["n_baseline"]) == 200  # the duplicated message counts once


def test_wire_bytes_delta_is_the_rfc_7905_overhead(built: Built) -> None:
    root, _, _ = built
    rows = {(r["payload"], r["metric"]): r for r in _rows(root / "comparisons.csv")}
    for payload in ("65", "100"):
        frames = rows[(payload, "frame_len_bytes")]
        assert float(frames["delta_median"]) == 21.0
        assert int(frames["n_baseline"]) == 197  # the 3 PUBLISH sharing one segment are left out
        assert rows[(payload, "tls_overhead_bytes")]["scenario_mean"] == "21"
    summary = {r["cell_id"]: r for r in _rows(root / "summary.csv")}
    assert summary["plain-65B-none-r1"]["frame_len"] == "142"
    assert summary["tls-65B-none-r1"]["frame_len"] == "163"


def test_study_table_sits_beside_the_published_numbers(built: Built) -> None:
    root, _, _ = built
    report = (root / "report.md").read_text(encoding="utf-8")
    study = report.split("## The study vs this run", 1)[1].split("\n## ", 1)[0]
    assert "16 B" in study and "21 B" in study and "5-byte record header" in study
    assert "+2.85 ms (+2.45 %)" in study and "+2.34 ms (+1.56 %)" in study
    assert "+31.63 bps (+13.82 %)" in study
    assert "+21 B per TLS record" in study
    assert "about 116.3 ms" in study  # 2.85 ms / 2.45 %


def test_report_explains_the_pitfalls(built: Built) -> None:
    root, _, _ = built
    report = (root / "report.md").read_text(encoding="utf-8")
    assert "Inter-arrival time is not one-way delay" in report
    assert "TCP hides loss" in report
    assert "virtual ESP32" in report and "simulated" in report
    assert "secondary sources" in report


def test_grades_in_summary(built: Built) -> None:
    root, _, _ = built
    row = next(r for r in _rows(root / "summary.csv") if r["cell_id"] == "tls-65B-none-r1")
    # sub-millisecond delay -> 4, jitter > 0 ms -> 3, loss 0 % -> 4; mean 11/3
    assert (row["tiphon_delay"], row["tiphon_jitter"], row["tiphon_loss"]) == ("4", "3", "4")
    assert float(row["tiphon_index"]) == pytest.approx(11 / 3, abs=1e-4)
    assert row["g1010"] == "pass"


def test_repeats_give_between_repeat_spread(bundle_factory: BundleFactory) -> None:
    root, generated = bundle_factory(payloads=(65,), repeats=3, samples=60)
    build_report(root, resamples=RESAMPLES)
    row = next(r for r in _rows(root / "comparisons.csv") if r["metric"] == "delay_ms")
    means = [generated[f"tls-65B-none-r{i}"]["delay"].mean() for i in (1, 2, 3)]
    assert row["repeats_scenario"] == "3" and int(row["n_scenario"]) == 180
    assert float(row["scenario_repeat_sd"]) == pytest.approx(np.std(means, ddof=1), rel=1e-9)
    connect = next(r for r in _rows(root / "comparisons.csv") if r["metric"] == "tcp_connect_ms")
    assert connect["n_baseline"] == "3" and connect["welch_p"] != "n/a"  # one value per repeat
    assert "Between-repeat spread" in (root / "report.md").read_text(encoding="utf-8")


def test_user_grading_table_adds_columns(bundle_factory: BundleFactory, tmp_path: Path) -> None:
    root, _ = bundle_factory()
    table = {"schema_version": 1, "kind": "pass_fail", "name": "lab", "title": "Lab alarm budget",
             "source": "our lab", "caveat": "local target", "category": "alarm",
             "requirements": {"median": {"metric": "delay_ms.median", "op": "<", "value": 0.7, "unit": "ms"}}}
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(table), encoding="utf-8")
    build_report(root, grading_tables=[path], resamples=RESAMPLES)
    verdicts = {r["cell_id"]: r["lab"] for r in _rows(root / "summary.csv")}
    assert verdicts["plain-65B-none-r1"] == "pass" and verdicts["tls-65B-none-r1"] == "fail"
    assert "Lab alarm budget" in (root / "report.md").read_text(encoding="utf-8")


def test_user_table_may_not_reuse_a_builtin_name(bundle_factory: BundleFactory, tmp_path: Path) -> None:
    root, _ = bundle_factory(payloads=(65,))
    text = (Path(__file__).parents[3] / "orchestrator" / "grading" / "g1010.yaml").read_text(encoding="utf-8")
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TestbedError, match="already used"):
        build_report(root, grading_tables=[path], resamples=RESAMPLES)


def test_stale_plot_is_removed(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    (root / "plots").mkdir()
    (root / "plots" / "old_figure.png").write_bytes(b"\x89PNG old")
    build_report(root, resamples=RESAMPLES)
    assert {p.name for p in (root / "plots").iterdir()} == PLOTS


def test_newer_schema_is_refused(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    (root / "manifest.json").write_text(json.dumps(manifest | {"schema_version": 99}), encoding="utf-8")
    with pytest.raises(TestbedError, match="schema_version 99 is newer"):
        build_report(root, resamples=RESAMPLES)


def test_newer_metrics_schema_is_refused(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    path = root / "runs" / "tls-65B-none-r1" / "metrics.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"schema_version": 3}), encoding="utf-8")
    with pytest.raises(TestbedError, match=r"metrics\.json: schema_version 3"):
        build_report(root, resamples=RESAMPLES)


def test_missing_manifest_is_a_clear_error(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    (root / "manifest.json").unlink()
    with pytest.raises(TestbedError, match=r"manifest\.json: missing"):
        build_report(root, resamples=RESAMPLES)


def test_bad_value_in_per_message_csv_names_file_line_and_column(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=20)
    path = root / "runs" / "plain-65B-none-r1" / "per_message.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    fields = lines[4].split(",")
    fields[header.index("delay_ms")] = "fast"
    lines[4] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TestbedError, match=r"per_message\.csv:5: delay_ms: not a number"):
        build_report(root, resamples=RESAMPLES)


def test_bad_cell_json_names_the_field(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    path = root / "runs" / "tls-65B-none-r1" / "cell.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"payload": "large"}), encoding="utf-8")
    with pytest.raises(TestbedError, match=r"cell\.json: payload"):
        build_report(root, resamples=RESAMPLES)


def test_missing_baseline_is_said_in_the_report_not_a_crash(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    build_report(root, baseline="tls13", resamples=RESAMPLES)
    assert _rows(root / "comparisons.csv") == []
    report = (root / "report.md").read_text(encoding="utf-8")
    assert "no finished cell of the baseline scenario 'tls13'" in report
    assert "(finished scenarios: plain, tls)" in report


def test_other_baseline_reverses_the_comparison(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    build_report(root, baseline="tls", resamples=RESAMPLES)
    row = next(r for r in _rows(root / "comparisons.csv") if r["metric"] == "frame_len_bytes")
    assert (row["baseline"], row["scenario"], row["delta_median"]) == ("tls", "plain", "-21")


def test_unavailable_delay_is_na_not_a_number(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    for cell in ("plain-65B-none-r1", "tls-65B-none-r1"):
        path = root / "runs" / cell / "metrics.json"
        metrics = json.loads(path.read_text())
        keys = ("n", "mean", "median", "p95", "p99", "min", "max", "std", "ci95_low", "ci95_high")
        metrics["delay_ms"] = {"available": False, "reason": "clocks not shared"} | dict.fromkeys(keys)
        path.write_text(json.dumps(metrics), encoding="utf-8")
    build_report(root, resamples=RESAMPLES)
    summary = _rows(root / "summary.csv")
    assert all(r["delay_mean_ms"] == "n/a" and r["tiphon_index"] == "n/a" and r["g1010"] == "n/a"
               for r in summary)
    assert not any(r["metric"] == "delay_ms" for r in _rows(root / "comparisons.csv"))
    assert "delay_cdf.png" not in {p.name for p in (root / "plots").iterdir()}


def test_manifest_as_the_sweep_writes_it(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,))
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    manifest.pop("git_commit")
    manifest |= {"git": {"commit": "abc123", "dirty": True}, "cells": {"tls-65B-none-r1": {"status": "ok"}},
                 "environment": {"host": {"kernel": "6.1.0-28-amd64", "cpus": 2}, "tshark": "4.0.17"}}
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    build_report(root, resamples=RESAMPLES)
    report = (root / "report.md").read_text(encoding="utf-8")
    assert "| git commit | abc123 (uncommitted changes) |" in report
    assert "| host.kernel | 6.1.0-28-amd64 |" in report and "| tshark | 4.0.17 |" in report
