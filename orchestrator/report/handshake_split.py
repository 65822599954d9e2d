"""Where a connection's set-up time goes (issue 41, part 4, the wire's side): per device stack, TLS version and
handshake kind, the medians of connections.csv's split (orchestrator/analysis/handshake_split.py defines it: device,
broker, network and held by TCP, adding up to first SYN -> CONNACK), over every connection of the cells that
reconnect (a persistent cell writes no connections.csv). Labelled measured: the time on the broker-side capture.

The medians are per part, over the same connections: they need not add up to the span's median. A cell's stack is
report/stacks.py's (the device's own word); a board's cells are labelled ``board``, plain MQTT's ``plain``.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    "not add up to the span's median. Measured; the device's own phase times and an ESP32 projection are not here."
)


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
    return [Heading(2, TITLE), Paragraph(ABOUT), Table(COLUMNS, rows, "The handshake split, measured on the wire")]


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
