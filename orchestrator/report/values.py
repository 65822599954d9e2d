"""A cell's numbers and how they are written: metric access, CSV text, numbers for people.

``None`` means not available and is rendered as "n/a" in every output.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestrator.analysis import grading
from orchestrator.report.loader import Cell, delay_available

NA = "n/a"
Row = dict[str, Any]


# ---------------------------------------------------------------- formatting
def csv_value(value: Any) -> str:
    """Deterministic CSV text: n/a for missing, 10 significant digits for floats."""
    if value is None:
        return NA
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float | np.floating):
        return NA if not math.isfinite(value) else f"{float(value):.10g}"
    return str(value)


def to_csv(rows: Sequence[Row], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_value(row.get(c)) for c in columns])
    return out.getvalue()


def num(value: float | None, decimals: int = 3, signed: bool = False) -> str:
    """A number for people: n/a when missing."""
    if value is None or not math.isfinite(value):
        return NA
    text = f"{value:+,.{decimals}f}" if signed else f"{value:,.{decimals}f}"
    if text.lstrip("+-").strip("0.,") == "":  # rounds to zero: no sign
        text = text.lstrip("+-")
        return "+" + text if signed else text
    return text


def pval(value: float | None) -> str:
    if value is None:
        return NA
    return "<1e-300" if value == 0 else f"{value:.3g}"


# ---------------------------------------------------------------- metric access
def metric(cell: Cell, path: str) -> float | None:
    """A number from the cell's metrics.json; delay_ms.* is None when delay is unavailable."""
    if cell.metrics is None:
        return None
    if path.startswith("delay_ms.") and not delay_available(cell.metrics):
        return None
    return grading.metric_value(cell.metrics, path)


def text(cell: Cell, path: str) -> str | None:
    node: Any = cell.metrics
    for key in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node if isinstance(node, str) else None


def cipher_suite(cell: Cell) -> str | None:
    """The negotiated suite as metrics.json records it (None for plaintext or no metrics)."""
    return (cell.metrics or {}).get("tls", {}).get("cipher_suite") or None


def short_suite(cell: Cell) -> str | None:
    """The negotiated version and the suite's cipher, e.g. "1.2 CHACHA20-POLY1305" for TLS 1.2's
    TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 (the full names stand in the table's legend)."""
    suite = cipher_suite(cell)
    if suite is None:
        return None
    cipher = suite.split("_WITH_", 1)[-1].removeprefix("TLS_")
    for digest in ("_SHA256", "_SHA384", "_SHA"):
        cipher = cipher.removesuffix(digest)
    version = (text(cell, "tls.version") or "").removeprefix("TLS").strip()
    return f"{version} {cipher.replace('_', '-')}".strip()


def suite_legend(cells: Sequence[Cell]) -> str | None:
    """The short suite names of ``cells`` with their full names, or None when no cell negotiated TLS."""
    pairs = sorted({(s, f"{text(c, 'tls.version') or ''} {cipher_suite(c)}".strip())
                    for c in cells if (s := short_suite(c)) is not None})
    return "TLS: " + "; ".join(f"{short} = {full}" for short, full in pairs) + "." if pairs else None
