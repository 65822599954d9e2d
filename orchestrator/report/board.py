"""A board's clock in the report: for each cell a board published (--publisher esp32), the clock estimate
that mapped its send times to the lab's clock, its bound, and whether one-way delay is given at that
precision; where it is not, the PUBACK round trip timed on the board's own clock (QoS 1) instead.

Read from metrics.json ``clock`` (orchestrator/runanalysis/analyse.py: with_delay_verdict). The section
appears only when a cell has it, so the report of a virtual-publisher bundle is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.report.document import Block, Heading, Paragraph, Table
from orchestrator.report.loader import Cell
from orchestrator.report.values import NA

COLUMNS = ("cell", "clock bound (ms)", "offset (ms)", "drift (ppm)", "one-way delay", "PUBACK round trip (ms)")
ABOUT = (
    "The board's send times are on its own clock. Before and after each cell it exchanges timestamps "
    "with the lab's time-echo service over its own network path (NTP-style, four timestamps); the "
    "exchange with the smallest round trip gives the offset, whose error is at most half that round "
    "trip (minus the service's hold time). One-way delay and uplink are given only where that bound is "
    "at most a quarter of the uplink median; otherwise they are n/a for the cell, and with QoS 1 the "
    "PUBLISH -> PUBACK round trip, timed on the board's clock alone, is the delay figure to read."
)


def _ms(us: Any) -> str:
    return f"{float(us) / 1000:.3f}" if isinstance(us, int | float) else NA


def _row(cell: Cell, clock: dict[str, Any]) -> tuple[str, ...]:
    puback = clock.get("puback_rtt_ms") or {}
    median = puback.get("median") if isinstance(puback, dict) else None
    rtt = f"{median:.3f}" if median is not None else NA
    if not clock.get("available"):
        return (cell.record.cell_id, NA, NA, NA, f"n/a: {clock.get('reason') or 'no clock estimate'}", rtt)
    verdict = clock.get("one_way_delay") or {}
    delay = "given" if verdict.get("available") else f"n/a: {verdict.get('reason') or 'no uplink figure'}"
    return (cell.record.cell_id, _ms(clock.get("bound_us")), _ms((clock.get("pre") or {}).get("offset_us")),
            f"{float(clock.get('drift_ppm', 0.0)):+.2f}", delay, rtt)


def board_section(cells: Sequence[Cell]) -> list[Block]:
    rows = tuple(_row(c, c.metrics["clock"]) for c in cells if c.metrics and isinstance(c.metrics.get("clock"), dict))
    if not rows:
        return []
    return [Heading(2, "Board clock"), Table(COLUMNS, rows, "The board's clock against the lab's, per cell"),
            Paragraph(ABOUT)]
