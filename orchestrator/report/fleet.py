"""The fleet section: cells with --devices N > 1 (metrics.json ``fleet``, written by analysis/fleet.py and
analysis/fleetbroker.py), one row per cell, the verdicts, each cell's devices.csv, and for cells repeated
the one-way delay pooled over the repeats (their histograms share fixed edges, so they add up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.analysis.fleet import histogram_quantile, merge_histograms
from orchestrator.analysis.fleetlag import limited, limited_label
from orchestrator.model.layout import RUNS, Layout
from orchestrator.report.document import Block, Bullets, Heading, Paragraph, Table
from orchestrator.report.loader import Cell
from orchestrator.report.values import NA

TITLE = "Fleet"
COLUMNS = ("cell", "devices", "connected", "delivered / lost", "lost: where", "one-way delay p50 / p99 ms",
           "handshake p50 / p99 ms", "schedule lag p99 ms (after first / all)", "broker CPU per message us (95 % CI)",
           "broker CPU per handshake ms (95 % CI)", "broker memory per client KiB", "loader CPU per message us",
           "limited")
POOLED_COLUMNS = ("payload", "condition", "scenario", "repeats", "messages", "one-way delay p50 ms <=",
                  "p99 ms <=")
KIND_COLUMNS = ("cell", "mode", "connections", "resumed after each device's first", "broker CPU per full handshake ms "
                "(95 % CI)", "per resumed handshake ms (95 % CI)", "per reading us (95 % CI)", "stats windows")
KIND_ABOUT = (
    "Fleet cells whose devices reconnect: every device's connections from the capture (its id from the decrypted "
    "CONNECT), and the broker's CPU per handshake of each kind on the wire and per reading from the same run: "
    "least squares over the broker's stats windows (its idle CPU a term of its own), 95 % bootstrap intervals "
    "over the windows; an interval across zero says the run could not tell that cost apart."
)
SHORT_PLACE = {"not on capture": "not on capture", "reached broker, not forwarded": "not forwarded",
               "forwarded, not received": "not received"}

ABOUT = (
    "Fleet cells: N virtual devices on one topic, each numbering its own messages, so a message is "
    "(device, seq). Delivered / lost count the messages in the devices' send logs; every lost one is placed "
    "by the broker-side capture (never on it / reached the broker, not forwarded / forwarded, not received; "
    "\"uncertain\" when the capture's legs miss delivered messages too). Schedule lag: a send's time against "
    "its schedule; \"after first\" measures each device's later sends against its own first (which waits for "
    "the connection), and a loader with more than 1 % of those over 10 ms late fell behind: one-way delay runs "
    "from the actual send, so such lag is not in it. Broker CPU per message: the steady phase's stats windows "
    "(after the last device connected, until the first stopped); per handshake: the connect phase's windows, "
    "nothing subtracted. "
    "Memory per client: the broker's memory once all were connected less before the first, per device "
    "connected. The broker is called the ceiling only when its CPU averaged at least 90 % of a core over the "
    "steady windows (Mosquitto works on one thread; the cell is then \"broker-limited\"); on one machine the loader "
    "shares the CPUs with it. The loader is checked too, on each host and in both phases: a cell where more than "
    "1 % of a host's sends after each device's first, or of its devices' connection starts, were more than 10 ms "
    "late is \"loader-limited\": its handshake times are the loader's as much as the broker's."
)


def cell_fleet_block(cell: Cell) -> dict[str, Any] | None:
    block = (cell.metrics or {}).get("fleet")
    return block if isinstance(block, dict) else None


def limits(cell: Cell) -> dict[str, Any] | None:
    """The cell's loader-limited / broker-limited verdicts (metrics.json ``fleet.limited``; a block analysed
    before it was written: from its figures), None when the cell is no fleet's."""
    block = cell_fleet_block(cell)
    if block is None:
        return None
    got = block.get("limited")
    return got if isinstance(got, dict) else limited(block)


def loader_limited(cell: Cell) -> bool:
    return bool((limits(cell) or {}).get("loader"))


def marked(cell: Cell) -> str:
    """The cell's id with its labels: "tls-65B-none-150dev-r1 (loader-limited)"."""
    labels = (limits(cell) or {}).get("labels") or []
    return cell.record.cell_id + (f" ({', '.join(labels)})" if labels else "")


LOADER_LIMITED = ("loader-limited: the loader fell behind its schedule (more than 1 % of a phase's sends or "
                  "connection starts more than 10 ms late on a host), so these figures are the loader's as much as "
                  "the broker's")


def fmt_scaled(value: Any, digits: int = 2, scale: float = 1.0) -> str:
    return NA if value is None else f"{float(value) * scale:.{digits}f}"


def _ci(figure: dict[str, Any] | None, scale: float, digits: int) -> str:
    if not figure or figure.get("cpu_ms_per_event") is None:
        return NA
    text = fmt_scaled(figure["cpu_ms_per_event"], digits, scale)
    if figure.get("ci95_low") is not None:
        low, high = fmt_scaled(figure["ci95_low"], digits, scale), fmt_scaled(figure["ci95_high"], digits, scale)
        text += f" ({low} .. {high})"
    return text


def _lost_where(msgs: dict[str, Any]) -> str:
    if not msgs.get("lost"):
        return "-"
    places = ", ".join(f"{SHORT_PLACE.get(k, k)} {v}" for k, v in (msgs.get("lost_at") or {}).items() if v)
    sure = (msgs.get("capture_coverage") or {}).get("lost_at_reliable", True)
    return places + ("" if sure else " (uncertain)")


def _pair(block: dict[str, Any] | None, a: str, b: str, scale: float = 1.0, digits: int = 2) -> str:
    block = block or {}
    return f"{fmt_scaled(block.get(a), digits, scale)} / {fmt_scaled(block.get(b), digits, scale)}"


def fleet_cell_row(cell: Cell, block: dict[str, Any]) -> tuple[str, ...]:
    msgs = block.get("messages") or {}
    broker = block.get("broker") or {}
    lag = block.get("schedule_lag_us") or {}
    steady_p99 = (lag.get("steady") or {}).get("p99")
    all_p99 = (lag.get("all") or {}).get("p99")
    memory = (broker.get("memory_per_client") or {}).get("bytes_per_client")
    return (cell.record.cell_id, str(block.get("devices")), str(block.get("connected")),
            f"{msgs.get('delivered')} / {msgs.get('lost')} of {msgs.get('sent')}", _lost_where(msgs),
            _pair(block.get("one_way_delay_ms"), "median", "p99", digits=3),
            _pair((block.get("connection_setup_ms") or {}).get("handshake_ms"), "p50", "p99"),
            f"{fmt_scaled(steady_p99, 2, 1e-3)} / {fmt_scaled(all_p99, 1, 1e-3)}",
            _ci(broker.get("per_message"), 1000.0, 1), _ci(broker.get("per_handshake"), 1.0, 2),
            fmt_scaled(memory, 1, 1 / 1024), fmt_scaled((block.get("cpu") or {}).get("loader_us_per_message"), 1),
            limited_label(limits(cell)) or NA)


def _per_kind(cell: Cell) -> dict[str, Any] | None:
    cpu = (cell.metrics or {}).get("broker_cpu") or {}
    source = cpu.get("process") or cpu.get("cgroup") or {}
    return source.get("per_handshake_kind")


def kind_rows(cells: Sequence[tuple[Cell, dict[str, Any]]]) -> list[tuple[str, ...]]:
    """One row per fleet cell that reconnects: its connections by kind and the broker's CPU per kind."""
    rows: list[tuple[str, ...]] = []
    for cell, _block in cells:
        conns = (cell.metrics or {}).get("connections")
        kinds = _per_kind(cell)
        if not isinstance(conns, dict) or kinds is None:
            continue
        handshakes = kinds.get("handshakes") or {}
        resumed = next((v for k, v in handshakes.items() if k.startswith("resumed") and v), None)
        rows.append((cell.record.cell_id, str(conns.get("mode")), f"{conns.get('count')} of {conns.get('expected')}",
                     f"{conns.get('resumed_after_first')} of {conns.get('reconnections')}",
                     _ci(handshakes.get("full"), 1.0, 3), _ci(resumed, 1.0, 3),
                     _ci(kinds.get("per_reading"), 1000.0, 1), str(kinds.get("windows", NA))))
    return rows


def verdict_text(block: dict[str, Any]) -> str:
    """The broker-ceiling and schedule-lag verdicts of a fleet cell."""
    limit = ((block.get("broker") or {}).get("broker_cpu_limit") or {}).get("verdict") or "no broker CPU series"
    lag = (block.get("schedule_lag_us") or {}).get("verdict") or "no schedule lag (no send logs)"
    return f"{limit}; {lag}"


def verdicts(cell: Cell, block: dict[str, Any]) -> str:
    devices = Layout(cell.folder).devices
    listed = f"{RUNS}/{cell.folder.name}/{devices.name}" if devices.is_file() else f"no {devices.name}"
    return f"{marked(cell)}: {verdict_text(block)}. Per device: {listed}."


def pooled_rows(groups: dict[tuple[int, str, str], list[Cell]]) -> list[tuple[str, ...]]:
    """Cells repeated: one-way delay quantiles from the repeats' histograms added up (a bin's upper edge)."""
    rows: list[tuple[str, ...]] = []
    for (payload, cond, scenario), cells in sorted(groups.items()):
        hists = [h for h in (((cell_fleet_block(c) or {}).get("one_way_delay_ms") or {}).get("histogram")
                             for c in cells) if h]
        if len(hists) < 2:
            continue
        try:
            pooled = merge_histograms(hists)
        except ValueError:
            continue
        rows.append((str(payload), cond, scenario, str(len(hists)), str(pooled["n"]),
                     fmt_scaled(histogram_quantile(pooled, 0.5), 3), fmt_scaled(histogram_quantile(pooled, 0.99), 3)))
    return rows


def fleet_section(cells: Sequence[Cell], groups: dict[tuple[int, str, str], list[Cell]]) -> list[Block]:
    """The section, or nothing when no cell is a fleet (a bundle without one reports as before)."""
    fleet_cells = [(c, b) for c in cells if c.ok and (b := cell_fleet_block(c)) is not None]
    if not fleet_cells:
        return []
    blocks: list[Block] = [Heading(2, TITLE), Paragraph(ABOUT),
                           Table(COLUMNS, tuple(fleet_cell_row(c, b) for c, b in fleet_cells), "Fleet cells"),
                           Bullets(tuple(verdicts(c, b) for c, b in fleet_cells))]
    kinds = kind_rows(fleet_cells)
    if kinds:
        blocks += [Paragraph(KIND_ABOUT), Table(KIND_COLUMNS, tuple(kinds), "A fleet that reconnects: handshakes by "
                                                                            "kind and the broker's CPU per kind")]
    fleet_groups = {k: [c for c in v if cell_fleet_block(c) is not None] for k, v in groups.items()}
    pooled = pooled_rows(fleet_groups)
    if pooled:
        blocks.append(Table(POOLED_COLUMNS, tuple(pooled), "One-way delay pooled over repeats (fixed-edge "
                                                          "histograms added; a bound within one bin)"))
    return blocks
