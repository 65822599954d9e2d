"""The report's sentences that state a result, each said only where the bundle's figures bear it out (otherwise they
say what the figures show), and the warnings the bundle's cells and kept-up labs recorded.

Warnings: every cell's cell.json ``warnings`` (a kept-up cell whose capture split was not lossless at its cut among
them: lab.capture.split, lab/capture_split.py), and every kept-up lab whose split.json says its split was not
lossless, with the cells it names.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.model.layout import SPLIT, BundleLayout
from orchestrator.report.document import Block, Heading, Paragraph, Table
from orchestrator.report.loader import Bundle, Cell
from orchestrator.report.values import cipher_suite, metric, num
from orchestrator.results.atomic import read_json

TCP_HIDES_LOSS = ("TCP hides loss. MQTT runs over TCP, so a dropped segment is retransmitted and its message still "
                  "reaches the subscriber, later; the retransmissions counted in the capture are reported beside the "
                  "loss.")
WARNINGS_TITLE = "Warnings"


def loss_sentence(cells: Sequence[Cell]) -> str:
    """What TCP does with a dropped segment, then what the finished cells' application loss was: "stays at 0 %" only
    where every one of them lost nothing."""
    losses = [(c.record.cell_id, v) for c in cells if (v := metric(c, "loss.loss_pct")) is not None]
    if not losses:
        return f"{TCP_HIDES_LOSS} No finished cell of this bundle has a loss figure."
    retransmissions = sum(int(v) for c in cells if (v := metric(c, "loss.tcp_retransmissions")) is not None)
    lost = [(cell, v) for cell, v in losses if v != 0]
    if not lost:
        return (f"{TCP_HIDES_LOSS} In this bundle application loss stays at 0 % in every finished cell "
                f"({len(losses)}), with {retransmissions} TCP retransmissions in all.")
    cell, most = max(lost, key=lambda lv: abs(lv[1]))
    return (f"{TCP_HIDES_LOSS} In this bundle application loss is not 0 % in {len(lost)} of {len(losses)} finished "
            f"cells (the most: {num(most, 2)} % in {cell}; {retransmissions} TCP retransmissions in all): there the "
            "subscriber did not receive every message (the loss % column).")


def overhead_check(cells: Sequence[Cell]) -> str:
    """The 21 B the overhead sentence derives for TLS 1.2 ChaCha20-Poly1305 (study.py OVERHEAD_SENTENCE), against
    what this bundle's cells of that suite measured: nothing to add where they bear it out (or none ran)."""
    measured = sorted({int(v) for c in cells if "_WITH_CHACHA20_POLY1305" in str(cipher_suite(c) or "")
                       and (v := metric(c, "overhead_bytes.tls_overhead")) is not None})
    if not measured or measured == [21]:
        return ""
    return (f" This bundle's TLS 1.2 ChaCha20-Poly1305 cells measured {' and '.join(f'{v} B' for v in measured)} "
            "per PUBLISH, not 21 B.")


def link_phrase(cells: Sequence[Cell]) -> str:
    """The virtual device's link as the cells ran it: between a lab inventory's hosts, or a Docker bridge here."""
    if any(c.record.hosts for c in cells):
        return "the link is the lab network between its hosts (each cell.json's hosts), not WiFi"
    return "the link is a Docker bridge on one host, not WiFi"


def _split_text(split: dict[str, object]) -> str:
    return (f"capture split not lossless at its cut: {split.get('missing')} packets missing, {split.get('extra')} "
            f"extra (lab.capture.split in cell.json)")


def _cell_rows(cells: Sequence[Cell]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for cell in cells:
        rows += [(cell.record.cell_id, w) for w in cell.record.warnings]
        split = ((cell.record.lab or {}).get("capture") or {}).get("split") or {}
        if split.get("lossless") is False and not any("capture split" in w for w in cell.record.warnings):
            rows.append((cell.record.cell_id, _split_text(split)))
    return rows


def _block_rows(bundle: Bundle) -> list[tuple[str, str]]:
    rows = []
    for path in sorted(BundleLayout(bundle.root).blocks.glob(f"*/{SPLIT}")):
        split = read_json(path)
        if split and not split.get("lossless"):
            named = sorted(split.get("cells_not_lossless") or {})
            where = f"at the cuts of {', '.join(named)}" if named else "at no cell's cut"
            unread = f", {split['unread_bytes']} bytes of it not read as packets" if split.get("unread_bytes") else ""
            rows.append((f"{path.parent.parent.name}/{path.parent.name}",
                         f"capture split not lossless ({split.get('packets')} packets in the capture, "
                         f"{split.get('in_cells')} in cells, {split.get('in_gaps')} in the gaps{unread}), {where}; "
                         "the whole capture is kept beside its gaps"))
    return rows


def warnings_section(bundle: Bundle, cells: Sequence[Cell]) -> list[Block]:
    """Every warning a cell or a kept-up lab recorded; nothing when there is none."""
    rows = [*_cell_rows(cells), *_block_rows(bundle)]
    if not rows:
        return []
    return [Heading(2, WARNINGS_TITLE),
            Paragraph("What the cells (cell.json warnings) and the kept-up labs (blocks/lab-NNN/split.json) "
                      "recorded as not as it should be; a cell here may still be among the finished ones."),
            Table(("cell or lab", "warning"), tuple(rows))]
