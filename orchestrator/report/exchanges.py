"""What a message's whole exchange costs at each QoS and MQTT version, and what TLS adds to it (metrics.json
``exchanges``, analysis/exchange.py; docs/qos-sessions.md has the definitions), for a report with QoS 1/2 or MQTT 5
cells: QoS 0 over 3.1.1 is their baseline (its exchange is the PUBLISH alone).

One row per cell with exchanges: the medians of the MQTT bytes each way and on the wire, the TLS bytes (wire - MQTT:
21 B per packet at TLS 1.2 ChaCha20-Poly1305), the packets of an exchange, DUP resends counted on the wire, and the
device's time to PUBACK / PUBCOMP. Then, per scenario, what MQTT 5 saves against 3.1.1 at the same QoS next to what
TLS costs the 3.1.1 exchange."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.model.axes import AXES
from orchestrator.report.document import Block, Heading, Paragraph, Table
from orchestrator.report.loader import Cell
from orchestrator.report.values import NA

TITLE = "QoS exchanges and MQTT 5"
COLUMNS = ("cell", "QoS", "MQTT", "MQTT B up", "MQTT B down", "MQTT B", "wire B", "TLS B", "packets", "complete",
           "DUP resends", "device ms to ack (median)")
SAVING_COLUMNS = ("scenario", "QoS", "MQTT 5", "MQTT B at 3.1.1", "MQTT B at 5", "MQTT 5 saves B",
                  "TLS adds B at 3.1.1")

STUDY_MQTT = AXES["mqtt"].default  # the study's MQTT version: the baseline of the savings


def _block(cell: Cell) -> dict[str, Any] | None:
    block = (cell.metrics or {}).get("exchanges")
    return block if isinstance(block, dict) else None


def _spec(cell: Cell) -> dict[str, Any]:
    return cell.record.spec or {}


def _version(cell: Cell) -> str:
    """3.1.1, 5, or "5 + alias"."""
    s = _spec(cell)
    return str(AXES.value(s, "mqtt")) + (" + alias" if s.get("topic_alias") == "on" else "")


def _b(value: Any) -> str:
    return NA if value is None else f"{value:.0f}"


def exchange_cell_rows(cells: Sequence[Cell]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for c in cells:
        b = _block(c)
        if b is None:
            continue
        wire, mqtt = b.get("median_wire_bytes"), b.get("median_mqtt_bytes")
        packets = (b.get("median_packets_up") or 0) + (b.get("median_packets_down") or 0)
        ack = b.get("median_ack_ms_device")
        rows.append((c.record.cell_id, str(_spec(c).get("qos", NA)), _version(c),
                     _b(b.get("median_mqtt_bytes_up")), _b(b.get("median_mqtt_bytes_down")), _b(mqtt), _b(wire),
                     _b(None if wire is None or mqtt is None else wire - mqtt), _b(packets),
                     f"{b['complete']} of {b['messages']}", str(b["dup_resends"]),
                     NA if ack is None else f"{ack:.3f}"))
    return rows


def saving_rows(cells: Sequence[Cell]) -> list[tuple[str, ...]]:
    """Per (scenario, QoS, MQTT 5 variant): the median exchange's MQTT bytes at 3.1.1 and at 5, and the TLS bytes
    at 3.1.1."""
    by: dict[tuple[str, int, str], dict[str, Any]] = {}
    for c in cells:
        b = _block(c)
        if b is not None:
            by[(c.record.scenario, int(AXES.value(_spec(c), "qos")), _version(c))] = b
    rows: list[tuple[str, ...]] = []
    for (scenario, qos, version), five in sorted(by.items()):
        base = by.get((scenario, qos, STUDY_MQTT))
        if version == STUDY_MQTT or base is None:
            continue
        m3, m5, wire = base.get("median_mqtt_bytes"), five.get("median_mqtt_bytes"), base.get("median_wire_bytes")
        rows.append((scenario, str(qos), version, _b(m3), _b(m5), _b(None if m3 is None or m5 is None else m3 - m5),
                     _b(None if wire is None or m3 is None else wire - m3)))
    return rows


def _beyond_qos0(cell: Cell) -> bool:
    """A cell with acknowledgements or MQTT 5: what the section is about (QoS 0 over 3.1.1 is its baseline)."""
    return _block(cell) is not None and (not AXES.is_default(_spec(cell), "qos") or _version(cell) != STUDY_MQTT)


def exchanges_section(cells: Sequence[Cell]) -> list[Block]:
    """Only where a cell is at QoS 1/2 or MQTT 5; then its QoS 0 / 3.1.1 cells are rows too (every single device's
    cell has exchanges), so a study at QoS 0 alone keeps its report as it was."""
    if not any(_beyond_qos0(c) for c in cells):
        return []
    rows = exchange_cell_rows(cells)
    out: list[Block] = [
        Heading(2, TITLE),
        Paragraph("Per message, its whole exchange from the capture, paired by packet id: PUBLISH (and DUP resends), "
                  "PUBACK, or PUBREC, PUBREL and PUBCOMP. MQTT B are the MQTT packets, wire B what TCP carried "
                  "(TLS: each packet's record with its header), TLS B the difference. Medians over the cell's "
                  "complete exchanges; the device's time to PUBACK / PUBCOMP is on its own monotonic clock."),
        Table(COLUMNS, tuple(rows)),
    ]
    savings = saving_rows(cells)
    if savings:
        out += [Paragraph("What MQTT 5 saves per exchange (with a topic alias: the topic, less 4 B of properties; "
                          "without one MQTT 5 adds 1 B, the property length, to each PUBLISH) next to what TLS adds "
                          "to the 3.1.1 exchange."),
                Table(SAVING_COLUMNS, tuple(savings))]
    return out
