"""The report's events section (issue 27 part 3): for every cell with events on its timeline (--events: a broker
restart or kill, a link down), what each event cost from the capture (metrics.json ``events``, analysis/events.py)
as a table, and the cell's timeline as a figure: devices connected, handshakes per second by kind, readings per
second at the broker and the broker's CPU, the events marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

from orchestrator.report import fleet, plots
from orchestrator.report.document import Block, Figure, Heading, Paragraph, Table
from orchestrator.report.loader import Cell

TITLE = "Events"
ABOUT = (
    "Cells with events on their timeline (--events): the broker process restarted (SIGTERM) or killed (SIGKILL) "
    "inside its container, whose network namespace the capture shares, or every device's link dropped both ways "
    "for a while. Per event, from the capture: the time from the event to each device's first CONNACK on a new "
    "connection and to its first PUBLISH at the broker once the event was over (p50 / p99 / max over the "
    "devices; 'kept' devices never lost their connection); each device's first connection after the event by "
    "handshake kind (a restart loses the broker's session IDs and ticket keys: full unless resumption survived "
    "it) and the resumption hit rate of the later ones; the readings sent from the event on lost or delivered "
    "late (at the broker more than 1 s after the device sent them); loader: whether the fleet's loader kept its "
    "schedule (a loader-limited cell's recovery is partly the loader's). Keepalive 60 s (PINGREQ after 30 s idle), "
    "the device's wait for an acknowledgement 10 s (--ack-timeout): a link down for less than that ends no "
    "connection, its readings arrive late."
)
COLUMNS = ("cell", "event", "connected again (s) p50 / p99 / max", "kept", "publishing again (s) p50 / p99 / max",
           "not back", "first after (by kind)", "resumed after", "sent", "late", "lost (where)", "loader")
KIND_COLOURS = {"full": "#d62728", "resumed-id": "#1f77b4", "resumed-ticket": "#2ca02c", "resumed-psk": "#17becf",
                "unknown": "#7f7f7f"}


def events_block(cell: Cell) -> dict[str, Any] | None:
    block = (cell.metrics or {}).get("events")
    return block if isinstance(block, dict) and block.get("events") else None


def _triple(d: dict[str, Any]) -> str:
    if not d or d.get("p50") is None:
        return "n/a"
    return f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} (n {d['n']})"


def _kinds(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"


def _lost(m: dict[str, Any]) -> str:
    parts = [(m["lost_not_on_capture"], "not on the capture"), (m["lost_at_broker"], "at the broker"),
             (m["lost_after_broker"], "after the broker")]
    where = ", ".join(f"{n} {w}" for n, w in parts if n)
    return f"{m['lost']}" + (f" ({where})" if where else "")


def event_rows(cell: Cell, block: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for ev in block["events"]:
        what = f"{ev['kind']} at {ev['at_s']:g} s" + (f" for {ev['duration_s']:g} s" if ev.get("duration_s") else "")
        rate = ev.get("resumption_hit_rate")
        m = ev["messages"]
        rows.append((cell.record.cell_id, what, _triple(ev["reconnected_s"]), str(ev["kept_connection"]),
                     _triple(ev["publishing_s"]), str(ev["not_back"]), _kinds(ev["first_after"]),
                     "n/a" if rate is None else f"{rate:.0%}", str(m["sent"]), str(m["late"]), _lost(m),
                     _loader(cell)))
    return rows


def _loader(cell: Cell) -> str:
    """Whether the cell's loader kept up (its recovery figures are then the capture's alone)."""
    loader = (fleet.limits(cell) or {}).get("loader")
    return "n/a" if loader is None else "loader-limited" if loader else "kept its schedule"


def timeline_png(block: dict[str, Any], title: str) -> bytes | None:
    """Three panels over the cell's time: devices connected, handshakes/s by kind, broker cores and readings/s."""
    tl = block.get("timeline") or {}
    t = tl.get("t") or []
    if not t:
        return None
    fig = plots._figure(7.5, 6.0)
    with matplotlib.rc_context(plots.RC):
        ax = fig.subplots(3, 1, sharex=True)
        ax[0].plot(t, tl["connected"], color="#333333")
        ax[0].set_ylabel("devices connected")
        bottom = [0.0] * len(t)
        for kind, counts in sorted(tl["handshakes"].items()):
            ax[1].bar(t, counts, width=tl["bin_s"], bottom=bottom, label=kind, color=KIND_COLOURS.get(kind))
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        ax[1].set_ylabel(f"handshakes / {tl['bin_s']:g} s")
        ax[1].legend(loc="upper right", fontsize=7)
        cores = tl.get("broker_cores") or {}
        if cores.get("t"):
            ax[2].plot(cores["t"], cores["cores"], color="#d62728", label="broker CPU (cores)")
        ax[2].set_ylabel("broker cores")
        twin = ax[2].twinx()
        twin.plot(t, tl["readings"], color="#1f77b4", linewidth=0.8, label="readings at the broker")
        twin.set_ylabel(f"readings / {tl['bin_s']:g} s")
        ax[2].set_xlabel("seconds from the first connection")
        for ev in block["events"]:
            start, over = ev["start"] - tl["t0"], ev["over"] - tl["t0"]
            for a in ax:
                a.axvspan(start, max(over, start + 0.2), color="#ff7f0e", alpha=0.25)
            ax[0].annotate(ev["kind"], (start, 1), xycoords=("data", "axes fraction"), va="top", fontsize=7)
        ax[0].set_title(title)
    return plots._png(fig)


def events_figures(cells: Sequence[Cell]) -> list[Figure]:
    out = []
    for cell in cells:
        block = events_block(cell)
        png = timeline_png(block, cell.record.cell_id) if block else None
        if png is not None:
            out.append(Figure(f"plots/events_{cell.record.cell_id}.png", f"{cell.record.cell_id}: devices connected, "
                              "handshakes by kind and the broker's CPU over the cell, the events marked", png))
    return out


def events_section(cells: Sequence[Cell]) -> list[Block]:
    """The section, or nothing when no cell had events."""
    rows = [row for c in cells if (b := events_block(c)) for row in event_rows(c, b)]
    if not rows:
        return []
    blocks: list[Block] = [Heading(2, TITLE),
                           Paragraph(ABOUT + " Each cell's timeline is among the figures (plots/events_*.png)."),
                           Table(COLUMNS, tuple(rows), "What each event cost, from the capture")]
    late = [c.record.cell_id for c in cells if events_block(c) and fleet.loader_limited(c)]
    if late:
        blocks.append(Paragraph(f"{', '.join(late)}: {fleet.LOADER_LIMITED}, these recovery figures too (the time to "
                                "connect and publish again is partly the loader's; see the Fleet section's "
                                "verdicts)."))
    return blocks
