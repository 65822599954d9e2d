"""Where a connection's set-up time goes (issue 41, part 4): per device stack, TLS version and handshake kind, the
medians of connections.csv's split (orchestrator/analysis/handshake_split.py defines it: device, broker, network and
held by TCP, adding up to first SYN -> CONNACK), over every connection of the cells that reconnect (a persistent cell
writes no connections.csv). Labelled measured: the time on the broker-side capture. Beside it, each labelled: the
device's own phases on its clock against the wire's device time (analysis/device_phases.py; the clock they ran on
named), and the ESP32 projection of each kind (analysis/projection.py; "projected", never mixed with a measurement).

The medians are per part, over the same connections: they need not add up to the span's median. A cell's stack is
report/stacks.py's (the device's own word); a board's cells are labelled ``board``, plain MQTT's ``plain``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from orchestrator.model.layout import Layout
from orchestrator.report import plots
from orchestrator.report.document import Block, Figure, Heading, Paragraph, Table
from orchestrator.report.loader import Cell
from orchestrator.report.stacks import stack_of
from orchestrator.report.values import NA

TITLE = "Where the set-up time goes: device, broker, network (measured on the wire)"
PARTS = (("split_device_ms", "device"), ("split_broker_ms", "broker"), ("split_network_ms", "network"),
         ("split_held_ms", "held by TCP"))
KEYS = ("stack", "tls", "handshake")
COLUMNS = ("device stack", "TLS", "handshake", "connections", *(f"{name} ms (median)" for _, name in PARTS),
           "first SYN -> CONNACK ms (median)", "CONNECT -> CONNACK ms (median)", "TCP round trip ms (median)")
ABOUT = (
    "Each connection's set-up, first SYN -> CONNACK on the broker-side capture, split without keys: a gap that "
    "ends at a broker frame is the broker's (TCP, TLS, MQTT); a client frame answering a broker frame came after one "
    "round trip (TCP's own SYN/ACK -> ACK) plus the device's work (key exchange, certificate verify, Finished); "
    "gaps within the device's flight are the device's; 'held by TCP' is a broker segment held until the device's "
    "delayed ACK released it (Nagle). Medians per part over the connections of the cells that reconnect: they need "
    "not add up to the span's median. Measured; the device's own phase times and an ESP32 projection follow, each "
    "labelled."
)
PHASE_COLUMNS = ("device stack", "TLS", "handshake", "clock", "compared", "device busy ms (median)",
                 "wire's device ms (median)", "|device - wire| ms (median / max)", "bound ms (median)", "beyond bound",
                 "hello / verified / flight in / key exchange / Finished ms (medians)")
PHASE_ABOUT = (
    "Measured on the device's own monotonic clock (its TLS library's state changes, ms since its handshake began), "
    "labelled with what it ran on: a virtual device's are the host CPU's, not an ESP32's. Its busy time (TCP "
    "connected -> CONNECT written, less its waits for the broker) against the wire's device time of the same "
    "connections; the bound per connection is turns x (TCP's round trip + the device's wake-up at its first turn) + "
    "1 us per frame time (docs/connections.md, \"The device's own phases\")."
)
PROJECTION_COLUMNS = ("TLS", "handshake", "suite", "stack", "projected device ms", "operations", "unknown in the table")
SOURCE_COLUMNS = ("stack", "operation", "ms each", "confidence", "source")


def _stack(cell: Cell) -> tuple[str, str]:
    if str((cell.record.spec or {}).get("publisher")) == "esp32":
        return "board", str((cell.metrics or {}).get("tls", {}).get("version") or "plain")
    found = stack_of(cell)
    return found if found else ("plain", "none")


def split_connections(cells: Sequence[Cell]) -> pd.DataFrame:
    """Every split connection of ``cells``, with its cell's stack and TLS version."""
    frames = []
    for cell in cells:
        path = Layout(cell.folder).connections
        if not path.is_file():
            continue
        try:
            table = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            continue
        if "split_span_ms" not in table:  # analysed before the split existed
            continue
        table = table[table["split_span_ms"].notna()].copy()
        table["stack"], table["tls"] = _stack(cell)
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def medians(cells: Sequence[Cell]) -> pd.DataFrame:
    """One row per (stack, TLS version, handshake kind): the connections and each part's median."""
    table = split_connections(cells)
    if table.empty:
        return table
    cols = [c for c, _ in PARTS] + ["split_span_ms", "mqtt_connect_ms", "split_rtt_ms"]
    grouped = table.groupby(list(KEYS), sort=True)
    out = grouped[cols].median()
    out.insert(0, "connections", grouped.size())
    return out.reset_index()


def _ms(value: object) -> str:
    return NA if value is None or pd.isna(value) else f"{float(value):.3f}"  # type: ignore[arg-type]


def split_section(cells: Sequence[Cell]) -> list[Block]:
    table = medians(cells)
    if table.empty:
        return []
    rows = tuple((str(r["stack"]), str(r["tls"]), str(r["handshake"]), str(int(r["connections"])),
                  *(_ms(r[c]) for c, _ in PARTS), _ms(r["split_span_ms"]), _ms(r["mqtt_connect_ms"]),
                  _ms(r["split_rtt_ms"])) for _, r in table.iterrows())
    return [Heading(2, TITLE), Paragraph(ABOUT), Table(COLUMNS, rows, "The handshake split, measured on the wire"),
            *phases_section(cells), *projection_section(cells)]


def split_figures(cells: Sequence[Cell]) -> list[Figure]:
    """Stacked bars per (stack, TLS version, kind): device, broker, network, held (medians), labelled measured."""
    table = medians(cells)
    if table.empty:
        return []
    bars = [(f"{r['stack']}\n{r['tls']} {r['handshake']}", [float(r[c]) for c, _ in PARTS])
            for _, r in table.iterrows()]
    png = plots.split_bars(bars, [name for _, name in PARTS])
    return [] if png is None else [Figure("plots/handshake_split.png", "Connection set-up split (measured on the "
                                          "wire, medians per part): device, broker, network, held by TCP", png)]


def _phase_rows(cells: Sequence[Cell]) -> pd.DataFrame:
    frames = []
    for cell in cells:
        path = Layout(cell.folder).connections
        block = ((cell.metrics or {}).get("connections") or {}).get("device_phases") or {}
        if not path.is_file() or not block.get("available"):
            continue
        table = pd.read_csv(path)
        if "device_busy_ms" not in table:
            continue
        table = table[table["device_busy_ms"].notna()].copy()
        table["stack"], table["tls"] = _stack(cell)
        table["clock"] = str(block.get("clock") or NA)
        frames.append(table)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _phase_row(key: tuple[str, ...], part: pd.DataFrame) -> tuple[str, ...]:
    diff = (part["device_vs_wire_ms"]).abs()
    phases = " / ".join(_ms(part[c].median()) for c in ("hello_sent_ms", "verified_ms", "flight_in_ms",
                                                           "kex_done_ms", "finished_sent_ms"))
    return (*key, str(len(part)), _ms(part["device_busy_ms"].median()), _ms(part["split_device_ms"].median()),
            f"{_ms(diff.median())} / {_ms(diff.max())}", _ms(part["device_wire_bound_ms"].median()),
            str(int((diff > part["device_wire_bound_ms"]).sum())), phases)


def phases_section(cells: Sequence[Cell]) -> list[Block]:
    """The device's own phases per (stack, TLS version, kind, clock), labelled with the clock they ran on."""
    table = _phase_rows(cells)
    if table.empty:
        return []
    keys = ["stack", "tls", "handshake", "clock"]
    rows = tuple(_phase_row(tuple(str(k) for k in key), part) for key, part in table.groupby(keys, sort=True))
    return [Paragraph(PHASE_ABOUT), Table(PHASE_COLUMNS, rows, "The device's own handshake time against the wire's "
                                          "(measured, on the clock named)")]


def _projection_kinds(cells: Sequence[Cell]) -> tuple[str | None, dict[tuple[str, ...], dict[str, Any]]]:
    label: str | None = None
    kinds: dict[tuple[str, ...], dict[str, Any]] = {}
    for cell in cells:
        block = ((cell.metrics or {}).get("connections") or {}).get("esp32_projection") or {}
        label = label or (str(block["label"]) if block.get("label") else None)
        for k in block.get("kinds") or []:
            for stack, p in (k.get("stacks") or {}).items():
                kinds[(str(k["tls_version"]), str(k["handshake"]), str(k["cipher_suite_id"]), stack)] = p
    return label, kinds


def _projected(p: dict[str, Any]) -> str:
    if p.get("projected_ms") is None:
        return f"{NA} (no figure in the table)"
    return ("at least " if p.get("lower_bound") else "") + f"{float(p['projected_ms']):.1f}"


def projection_section(cells: Sequence[Cell]) -> list[Block]:
    """Each handshake kind of the cells projected on an ESP32 at 240 MHz, with every operation's source."""
    label, kinds = _projection_kinds(cells)
    if not kinds:
        return []
    rows = tuple((*key[:3], key[3], _projected(p), ", ".join(f"{o['count']:g} x {o['operation']}"
                                                             for o in p["operations"]), ", ".join(p["unknown"]) or "-")
                 for key, p in sorted(kinds.items()))
    sources = {(key[3], o["operation"]): o for key, p in kinds.items() for o in p["operations"]}
    src_rows = tuple((stack, op, NA if o["ms_each"] is None else f"{o['ms_each']:g}", str(o["confidence"] or "-"),
                      str(o["source"])) for (stack, op), o in sorted(sources.items()))
    about = (f"{label}: not a measurement. The device's operations for each handshake kind seen in these cells, times "
             "a per-operation table of the ESP32 at 240 MHz (each value's source below; replace the table with "
             "TESTBED_ESP32_OPS_TABLE=<your YAML>). ECDHE over P-256 assumed; an operation without a figure leaves "
             "the sum a lower bound ('at least').")
    return [Paragraph(about), Table(PROJECTION_COLUMNS, rows, f"The ESP32 projection per handshake kind ({label})"),
            Table(SOURCE_COLUMNS, src_rows, f"The per-operation figures and their sources ({label})")]
