"""The device's own TLS stack side by side (issue 25): per payload, TLS 1.2 on mbedTLS 2.28, TLS 1.2 on mbedTLS 3.6
and TLS 1.3 on mbedTLS 3.6, from the cells that ran each (``--device-stacks mbedtls-2.28,mbedtls-3.6`` with the
``tls`` and ``tls13-chacha20`` scenarios).

One table per payload and condition (the impairment, a connection mode, a fleet's size, the MQTT protocol: the
cell's condition without its stack), one column per stack and version, one row per figure: what the cells' metrics
hold, the mean over repeats, and ``n/a`` with nothing made up where a cell holds no figure or no cell ran that stack
(docs/measurement-notes.md defines each figure). A cell's stack is the device's own word (cell.json ``device``:
the library its banner names), else the run's ``device_stack``; a board's cells are left out (its banner is in
the board section)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from orchestrator.model.axes import AXES
from orchestrator.report.document import Block, Heading, Paragraph, Table
from orchestrator.report.lifecycle import round_trips_median
from orchestrator.report.loader import Cell
from orchestrator.report.values import NA, metric, text

TITLE = "The device's TLS stack: TLS 1.2 on mbedTLS 2.28 and 3.6, TLS 1.3 on 3.6"
STACKS = (("mbedtls-2.28", "TLS 1.2"), ("mbedtls-3.6", "TLS 1.2"), ("mbedtls-3.6", "TLS 1.3"))
COLUMNS = ("figure", *(f"{version} on {stack.replace('mbedtls-', 'mbedTLS ')}" for stack, version in STACKS))
STACK_TOKEN = "mbedtls-3.6"  # the condition's part that names the 3.6 stack (results/bundle.py protocol)
Getter = Callable[[Cell], float | None]


def stack_of(cell: Cell) -> tuple[str, str] | None:
    """(device stack, negotiated TLS version) of a virtual device's TLS cell; None for plain, a board, no metrics."""
    version = text(cell, "tls.version")
    spec = cell.record.spec or {}
    if version is None or spec.get("publisher") == "esp32":
        return None
    library = str((cell.record.device or {}).get("tls_library") or "")
    found = re.search(r"(\d+)\.(\d+)\.\d+", library)
    stack = f"mbedtls-{found.group(1)}.{found.group(2)}" if found else str(AXES.value(spec, "device_stack"))
    return (stack, version)


def base_condition(cell: Cell) -> str:
    """The cell's condition without the device stack: the cells a table sets side by side."""
    words = [w for w in cell.condition.split(" ") if w != STACK_TOKEN]
    return " ".join(words).removesuffix(" +").strip()


def _mean(cells: Sequence[Cell], get: Getter) -> float | None:
    values = [v for v in (get(c) for c in cells) if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def _path(path: str) -> Getter:
    return lambda c: metric(c, path)


def _split(key: str) -> Getter:
    def get(cell: Cell) -> float | None:
        split = ((cell.metrics or {}).get("overhead_bytes") or {}).get("tls13_record")
        value = split.get(key) if isinstance(split, dict) and split.get("records") else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return get


def _handshake_total(cell: Cell) -> float | None:
    up, down = metric(cell, "handshake.bytes_client_to_server"), metric(cell, "handshake.bytes_server_to_client")
    return None if up is None or down is None else up + down


def _cpu(cell: Cell) -> dict[str, Any]:
    cpu = (cell.metrics or {}).get("broker_cpu") or {}
    return cpu.get("process") or cpu.get("cgroup") or {}


def _cpu_per_handshake(kind: str) -> Getter:
    def get(cell: Cell) -> float | None:
        figure = ((_cpu(cell).get("per_handshake_kind") or {}).get("handshakes") or {}).get(kind)
        return figure.get("cpu_ms_per_event") if isinstance(figure, dict) else None
    return get


def _cpu_per_message(cell: Cell) -> float | None:
    figure = _cpu(cell).get("per_reading")
    return figure.get("cpu_ms_per_event") if isinstance(figure, dict) else None


# (row label, value getter, decimals)
FIGURES: tuple[tuple[str, Getter, int], ...] = (
    ("wire bytes per PUBLISH (frame)", _path("overhead_bytes.frame_len"), 0),
    ("MQTT bytes per PUBLISH", _path("overhead_bytes.mqtt_len"), 0),
    ("TLS bytes per PUBLISH", _path("overhead_bytes.tls_overhead"), 0),
    ("TLS 1.3 record: header", _split("header"), 0),
    ("TLS 1.3 record: inner content type", _split("inner_content_type"), 0),
    ("TLS 1.3 record: tag", _split("tag"), 0),
    ("TLS 1.3 record: padding", _split("padding"), 1),
    ("padding granularity (the device's)", _split("padding_granularity"), 0),
    ("handshake bytes client->broker", _path("handshake.bytes_client_to_server"), 0),
    ("handshake bytes broker->client", _path("handshake.bytes_server_to_client"), 0),
    ("handshake bytes both ways", _handshake_total, 0),
    ("TLS handshake ms (ClientHello -> Finished)", _path("handshake.tls_handshake_ms"), 2),
    ("handshake round trips", round_trips_median, 1),
    ("MQTT CONNECT -> CONNACK ms", _path("handshake.mqtt_connect_ms"), 2),
    ("broker CPU ms per full handshake", _cpu_per_handshake("full"), 3),
    ("broker CPU ms per resumed handshake (id)", _cpu_per_handshake("resumed-id"), 3),
    ("broker CPU ms per resumed handshake (ticket)", _cpu_per_handshake("resumed-ticket"), 3),
    ("broker CPU ms per resumed handshake (PSK, TLS 1.3)", _cpu_per_handshake("resumed-psk"), 3),
    ("broker CPU ms per message", _cpu_per_message, 4),
)


def _resumption(cells: Sequence[Cell]) -> str:
    """Connections resumed on the wire of the first cell that reconnects, by kind; persistent cells say so."""
    for cell in cells:
        block = (cell.metrics or {}).get("connections")
        if isinstance(block, dict) and block.get("count"):
            kinds = {k: v for k, v in (block.get("handshakes") or {}).items() if v}
            resumed = sum(v for k, v in kinds.items() if k.startswith("resumed"))
            what = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
            return f"{resumed} of {block['count']} resumed ({block.get('mode')}: {what})"
    return "not asked (one persistent connection)" if cells else NA


def _cell_count(cells: Sequence[Cell]) -> str:
    if not cells:
        return "no cell"
    suites = sorted({s for c in cells if (s := text(c, "tls.cipher_suite"))})
    library = sorted({str((c.record.device or {}).get("tls_library")) for c in cells
                      if (c.record.device or {}).get("tls_library")})
    return f"{len(cells)} cell(s): {', '.join(library) or 'library not recorded'}; {', '.join(suites) or NA}"


def table_rows(by_stack: dict[tuple[str, str], list[Cell]]) -> list[tuple[str, ...]]:
    """The figures (rows) of one payload and condition, a column per stack and version."""
    columns = [by_stack.get(s, []) for s in STACKS]
    rows: list[tuple[str, ...]] = [("cells", *(_cell_count(c) for c in columns))]
    for label, get, decimals in FIGURES:
        values = [_mean(c, get) for c in columns]
        rows.append((label, *(NA if v is None else f"{v:,.{decimals}f}" for v in values)))
    rows.append(("resumption on the wire", *(_resumption(c) for c in columns)))
    return rows


def grouped(cells: Sequence[Cell]) -> dict[tuple[int, str], dict[tuple[str, str], list[Cell]]]:
    """ok TLS cells of a virtual device by (payload, condition without the stack), then by (stack, version)."""
    out: dict[tuple[int, str], dict[tuple[str, str], list[Cell]]] = {}
    for cell in sorted(cells, key=lambda c: (c.record.payload, c.record.repeat, c.record.cell_id)):
        stack = stack_of(cell)
        if stack is not None and cell.ok:
            out.setdefault((cell.record.payload, base_condition(cell)), {}).setdefault(stack, []).append(cell)
    return out


def stacks_section(cells: Sequence[Cell]) -> list[Block]:
    """The section, when the bundle ran the device on mbedTLS 3.6 (else nothing: no stack to compare)."""
    groups = {k: v for k, v in grouped(cells).items() if any(s[0] == "mbedtls-3.6" for s in v)}
    if not groups:
        return []
    out: list[Block] = [
        Heading(2, TITLE),
        Paragraph("Per payload, the virtual device's cells on each TLS stack and version side by side; each figure "
                  "is the mean over the repeats that hold it, n/a where none does. Bytes are medians per PUBLISH "
                  "of the publisher->broker leg; a TLS 1.3 record's overhead is split into its 5 B header, 1 B "
                  "inner content type, tag and padding (mbedTLS 3.x pads each record's plaintext to a multiple of "
                  "its build's granularity, which the device reports; OpenSSL does not pad). Handshake bytes are "
                  "every byte each way up to and including CONNACK; handshake round trips are the median over a "
                  "reconnecting cell's connections of the times the client waited for the broker before it could "
                  "send application data (connections.csv, n/a for a persistent cell); the broker's CPU per "
                  "handshake comes from a cell that reconnects, per message from the Mosquitto process (else its "
                  "container)."),
    ]
    for (payload, condition), by_stack in sorted(groups.items()):
        title = f"{payload} B payload" + ("" if condition == "none" else f", {condition}")
        out += [Heading(3, title), Table(COLUMNS, tuple(table_rows(by_stack)))]
    return out
