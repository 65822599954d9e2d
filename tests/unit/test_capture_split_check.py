"""Each cut of a block's capture checked when it is made (orchestrator/lab/capture_split.py Cut.check): a lossy split
is the cells' it touched, marked in each one's record (cell.json lab.capture.split) with a warning printed at the
cell's end, not only a block-wide ``lossless: 0`` at the lab's teardown that no cell and no report mentioned."""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import pytest

from orchestrator.lab import capture_split
from orchestrator.lab.capture_split import CaptureSplitter, count_packets
from tests.unit.test_capture_split import _pcapng

SYN, ACK = 0x02, 0x10
CELL_A = [(1.0, 40000, SYN), (1.1, 40000, ACK), (1.2, 40000, ACK), (1.3, 40000, ACK)]
CELL_B = [(2.2, 40001, SYN), (2.3, 40001, ACK), (2.4, 40001, ACK)]
AFTER = [(3.5, 40002, SYN)]  # from after b's end: what tells the cut the file holds all before it


def _split(tmp_path: Path, frames: list[tuple[float, int, int]]) -> tuple[CaptureSplitter, Path]:
    capture = tmp_path / "capture.pcapng"
    capture.write_bytes(_pcapng(frames))
    return CaptureSplitter(capture, tmp_path / "gaps.pcapng"), capture


def test_a_lossless_split_checks_every_cut_lossless(tmp_path: Path) -> None:
    """A late segment of a's connection in b's window and a packet of a's window written after one of b's (out of
    time order): both go to the gaps, counted; no cut is marked, split.json is as it was."""
    late = (1.9, 40000, ACK)
    split, _ = _split(tmp_path, [*CELL_A, (2.05, 40000, ACK), (2.1, 40003, ACK), late, *CELL_B, *AFTER])
    a = split.cut("a", 0.5, 2.0, tmp_path / "a.pcapng")
    b = split.cut("b", 2.0, 3.0, tmp_path / "b.pcapng")
    assert a.check() == {"lossless": True, "missing": 0, "extra": 0, "window_packets_in_capture": 4,
                         "window_packets_taken": 4, "packets_read": 4, "packets_written": 4}
    assert b.check()["lossless"] is True and (b.packets, b.to_gaps) == (4, 2)
    assert split.finish() == {"packets": 11, "in_cells": 8, "in_gaps": 3, "lossless": 1}


def test_a_capture_rewritten_under_the_split_marks_the_cell_whose_packets_it_lost(tmp_path: Path) -> None:
    """The capture file truncated and written again after a's cut (a capture restarted): b's packets are in the file
    but not where the cut reads on, so b's capture is empty. The cut of b says so, with the count; a's stays
    lossless; split.json names b. Before, b's cut gave 0 packets and nothing else: no check, no cell named."""
    split, capture = _split(tmp_path, [*CELL_A, (2.1, 40003, ACK), (2.15, 40003, ACK)])
    a = split.cut("a", 0.5, 2.0, tmp_path / "a.pcapng")
    capture.write_bytes(_pcapng([*CELL_B, *AFTER]))  # shorter than what was read: the cut reads on past its end
    b = split.cut("b", 2.0, 3.0, tmp_path / "b.pcapng")
    record = split.finish()
    assert record["lossless"] == 0 and list(record.get("cells_not_lossless", {})) == ["b"], record
    assert a.check()["lossless"] is True and b.packets == 0
    assert b.check() == {"lossless": False, "missing": 3, "extra": 0, "window_packets_in_capture": 3,
                         "window_packets_taken": 0, "packets_read": 0, "packets_written": 0}
    assert record["cells_not_lossless"]["b"] == b.check()


def test_a_cut_whose_cell_capture_lost_a_packet_on_its_way_to_the_disk_is_marked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a cut read against what its outputs hold, read back: a write that lands one block short (planted) is the
    cell's missing packet, though the capture and the cut's counts agree."""
    split, _ = _split(tmp_path, [*CELL_A, *CELL_B, *AFTER])
    real, one_packet = capture_split.open_with_mode, len(_pcapng([(1.3, 40000, ACK)])) - len(_pcapng([]))

    class Short:  # the cell's file, written one packet short
        def __init__(self, f: BinaryIO) -> None:
            self.f = f

        def __enter__(self) -> Short:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, data: bytes) -> int:
            return self.f.write(data[:-one_packet])

    def short(path: Path, **kw: Any) -> Any:
        return Short(real(path, **kw)) if path.name == "b.pcapng" else real(path, **kw)

    monkeypatch.setattr(capture_split, "open_with_mode", short)
    split.cut("a", 0.5, 2.0, tmp_path / "a.pcapng")
    b = split.cut("b", 2.0, 3.0, tmp_path / "b.pcapng")
    assert count_packets(tmp_path / "b.pcapng") == 2 and b.packets == 3
    record = split.finish()  # the block's count alone (the capture's packets = the cuts' counts) sees nothing
    assert record["lossless"] == 0 and record.get("cells_not_lossless", {}).keys() == {"b"}, record
    assert b.check() == {"lossless": False, "missing": 1, "extra": 0, "window_packets_in_capture": 3,
                         "window_packets_taken": 3, "packets_read": 3, "packets_written": 2}


def test_bytes_of_the_capture_that_no_block_was_read_from_make_the_split_not_lossless(tmp_path: Path) -> None:
    """A block that does not read as one (a length under 12) in the middle of the capture: the cut stops there, and
    so does the whole file's count, so packets = cells + gaps held while b's packets after it were in no file."""
    import struct

    head, tail = _pcapng(CELL_A), _pcapng([*CELL_B, *AFTER])[len(_pcapng([])):]
    capture = tmp_path / "capture.pcapng"
    capture.write_bytes(head + struct.pack("<II", 0x00000006, 8) + tail)
    split = CaptureSplitter(capture, tmp_path / "gaps.pcapng")
    split.cut("a", 0.5, 2.0, tmp_path / "a.pcapng")
    split.cut("b", 2.0, 3.0, tmp_path / "b.pcapng")
    record = split.finish()
    assert record["lossless"] == 0 and record.get("unread_bytes") == 8 + len(tail), record
    assert (record["packets"], record["in_cells"], record["in_gaps"]) == (4, 4, 0)


def _kept_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rewrite: bool) -> dict[str, Any]:
    """Two cells of a kept-up lab (lab/keptlab.py _cut), the capture rewritten between them or not: b's lab facts."""
    from orchestrator.lab import keptlab
    from orchestrator.model.layout import Layout

    monkeypatch.setattr(keptlab, "CUT_WAIT_S", 0.1)
    split, capture = _split(tmp_path, [*CELL_A, (2.1, 40003, ACK), *([] if rewrite else [*CELL_B, *AFTER])])
    lab = keptlab.KeptLab(tmp_path / "blocks")
    lab.splitter, lab.facts = split, {"folder": "blocks/lab-001"}
    lab._cut(Layout(tmp_path / "runs" / "a"), 0.5, 2.0)
    if rewrite:
        capture.write_bytes(_pcapng([*CELL_B, *AFTER]))
    lab.facts = {"folder": "blocks/lab-001"}
    lab._cut(Layout(tmp_path / "runs" / "b"), 2.0, 3.0)
    return lab.facts


@pytest.mark.parametrize("rewrite", [False, True])
def test_a_kept_up_cell_records_its_cuts_check_and_warns_when_it_is_not_lossless(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rewrite: bool) -> None:
    facts = _kept_cut(tmp_path, monkeypatch, rewrite)
    split = facts["capture"].get("split")
    assert split is not None, "the cell's record has no check of its cut"
    assert split["lossless"] is (not rewrite) and split["missing"] == (3 if rewrite else 0)

    from orchestrator.measure.cell import CellWriter
    from orchestrator.measure.local import record_cut
    from orchestrator.model.cell import CellRecord
    from orchestrator.model.layout import Layout
    record = CellWriter(Layout(tmp_path / "runs" / "b"), CellRecord(cell_id="b", scenario="plain", payload=65,
                                                                     status="running"))
    printed: list[str] = []
    record_cut(record, facts, printed.append)
    record.save()
    assert record.record.to_json()["lab"]["capture"]["split"] == split
    warned = [w for w in record.record.warnings if "capture split was not lossless" in w]
    if rewrite:
        assert warned == [w.removeprefix("b: warning: ") for w in printed] and "3 packets missing" in warned[0]
        assert "blocks/lab-001/capture/" in warned[0]
    else:
        assert not warned and not printed
