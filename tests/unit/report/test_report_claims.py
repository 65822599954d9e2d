"""The report's sentences that state a result, said only where the bundle's figures bear them out, and the warnings
of its cells and kept-up labs (orchestrator/report/claims.py): a capture split that was not lossless at a cell's cut
is in the report, where before the report said nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.report import build_report, sections
from orchestrator.report.loader import load_bundle
from tests.unit.report.conftest import BundleFactory

RESAMPLES = 200


def _meaning(root: Path) -> str:
    """The report's "What the numbers mean" bullets for the bundle as it is on disk (sections.explanations, which
    build_report puts into report.md: a whole build takes seconds)."""
    return "\n".join(sections.explanations(load_bundle(root)))


def _set_loss(root: Path, cell_id: str, loss_pct: float, retransmissions: int) -> None:
    path = root / "runs" / cell_id / "metrics.json"
    metrics = json.loads(path.read_text(encoding="utf-8"))
    metrics["loss"].update(loss_pct=loss_pct, tcp_retransmissions=retransmissions)
    path.write_text(json.dumps(metrics), encoding="utf-8")


def test_a_bundle_whose_cells_lost_nothing_is_told_its_application_loss_stays_at_0(
        bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=40)
    meaning = _meaning(root)
    assert "application loss stays at 0 %" in meaning
    assert "application loss stays at 0 % in every finished cell (2), with 0 TCP retransmissions in all" in meaning


def test_a_bundle_that_lost_messages_is_not_told_its_application_loss_stays_at_0(
        bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=40)
    _set_loss(root, "tls-65B-none-r1", 2.5, 7)
    meaning = _meaning(root)
    assert "stays at 0 %" not in meaning, "a bundle that lost messages is told its loss stays at 0 %"
    assert ("application loss is not 0 % in 1 of 2 finished cells (the most: 2.50 % in tls-65B-none-r1; 7 TCP "
            "retransmissions in all)") in meaning
    assert "TCP hides loss" in meaning  # what TCP does is said either way


def test_a_bundle_without_loss_figures_is_told_so(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=40, failed=("plain-65B-none-r1", "tls-65B-none-r1"))
    meaning = _meaning(root)
    assert "stays at 0 %" not in meaning and "No finished cell of this bundle has a loss figure" in meaning


def test_the_21_b_of_a_tls12_chacha20_record_is_contradicted_where_the_cells_measured_otherwise(
        bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=40)
    assert "5 + 16 = 21 B" in _meaning(root) and "not 21 B" not in _meaning(root)  # the cells measured 21 B
    path = root / "runs" / "tls-65B-none-r1" / "metrics.json"
    metrics = json.loads(path.read_text(encoding="utf-8"))
    metrics["overhead_bytes"]["tls_overhead"] = 29
    path.write_text(json.dumps(metrics), encoding="utf-8")
    assert "This bundle's TLS 1.2 ChaCha20-Poly1305 cells measured 29 B per PUBLISH, not 21 B." in _meaning(root)


def test_the_link_is_named_as_the_cells_ran_it(bundle_factory: BundleFactory) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=40)
    assert "a Docker bridge on one host, not WiFi" in _meaning(root)
    path = root / "runs" / "tls-65B-none-r1" / "cell.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "hosts": [{"name": "pub", "role": "publisher"}]}))
    meaning = _meaning(root)
    assert "Docker bridge" not in meaning and "the lab network between its hosts" in meaning


def _lossy_kept_up_cell(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tls-65B-none-r1 as a kept-up lab's second cell, the block's capture rewritten after the first cell's cut (a
    planted lossy split): its cut, its record (measure/local.py record_cut) and the lab's split.json, as a sweep
    writes them."""
    from orchestrator.lab import keptlab
    from orchestrator.measure import local
    from orchestrator.measure.cell import CellWriter
    from orchestrator.model.cell import CellRecord
    from orchestrator.model.layout import Layout
    from orchestrator.results.atomic import write_json_atomic
    from tests.unit.test_capture_split import _pcapng
    from tests.unit.test_capture_split_check import AFTER, CELL_A, CELL_B, _split

    monkeypatch.setattr(keptlab, "CUT_WAIT_S", 0.1)
    lab_dir = root / "blocks" / "lab-001"
    (lab_dir / "capture").mkdir(parents=True)
    split, capture = _split(lab_dir / "capture", [*CELL_A, (2.1, 40003, 0x10)])
    lab = keptlab.KeptLab(root / "blocks")
    lab.splitter, lab.facts = split, {"folder": "blocks/lab-001"}
    lab._cut(Layout(root / "runs" / "plain-65B-none-r1"), 0.5, 2.0)
    capture.write_bytes(_pcapng([*CELL_B, *AFTER]))  # the capture rewritten, shorter than what was read
    lay = Layout(root / "runs" / "tls-65B-none-r1")
    lab.facts = {"folder": "blocks/lab-001"}
    lab._cut(lay, 2.0, 3.0)
    record = CellWriter(lay, CellRecord.model_validate(json.loads(lay.cell.read_text())))
    if hasattr(local, "record_cut"):
        local.record_cut(record, lab.facts, lambda _: None)
    else:  # as measure/local.py recorded a kept-up cell before its cut was checked (db8fc42)
        record.set(lab=lab.facts)
    record.save()
    write_json_atomic(lab_dir / "split.json", {"cells_served": 2, **split.finish()})
    old = root / "blocks" / "lab-002" / "split.json"  # as a sweep wrote it before: the block's count alone
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"cells_served": 1, "packets": 30, "in_cells": 27, "in_gaps": 2, "lossless": 0}))


def test_a_lossy_capture_split_is_in_the_reports_warnings(bundle_factory: BundleFactory,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = bundle_factory(payloads=(65,), samples=40)
    _lossy_kept_up_cell(root, monkeypatch)
    build_report(root, resamples=RESAMPLES)
    report = (root / "report.md").read_text(encoding="utf-8")
    assert "## Warnings" in report, "the report says nothing of a capture split that lost a cell's packets"
    warnings = report.split("## Warnings", 1)[1].split("\n## ", 1)[0]
    assert "tls-65B-none-r1" in warnings and "capture split was not lossless at this cell's cut: 3 packets" in warnings
    assert "blocks/lab-001" in warnings and "at the cuts of tls-65B-none-r1" in warnings
    assert "blocks/lab-002" in warnings and "(30 packets in the capture, 27 in cells, 2 in the gaps)" in warnings
    assert "plain-65B-none-r1" not in warnings  # its cut was lossless

    from orchestrator.report import claims

    clean = load_bundle(bundle_factory(payloads=(65,), samples=40)[0])
    assert claims.warnings_section(clean, clean.cells) == []  # nothing to warn of: no section
