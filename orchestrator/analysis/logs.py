"""Read the publisher's send log and the subscriber's receive log (CSV, one line per message).

publisher:  ``seq,t_send_us,bytes``      subscriber: ``seq,t_recv_us,bytes,dup``
Both are written line by line; a crash can leave a last line without its newline. That line is
dropped (its numbers may be cut short) and a warning says so; any other unreadable line is also
dropped and reported with its line number, never guessed.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.errors import TestbedError

PUBLISHER_COLUMNS = ("seq", "t_send_us", "bytes")
SUBSCRIBER_COLUMNS = ("seq", "t_recv_us", "bytes", "dup")
_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no", ""}


@dataclass
class LogTable:
    """Rows in file order (the subscriber's order is arrival order) plus what was dropped."""

    frame: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def _int(text: str) -> int:
    return int(text.strip())


def _flag(text: str) -> int:
    t = text.strip().lower()
    if t in _TRUE:
        return 1
    if t in _FALSE:
        return 0
    raise ValueError(text)


def read_log(path: Path, columns: tuple[str, ...]) -> LogTable:
    """Parse one log. The header line is optional; ``dup`` accepts 0/1/true/false."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise TestbedError(f"cannot read log {path}: {exc.strerror}") from exc
    lines = text.split("\n")
    warnings: list[str] = []
    if lines and lines[-1] == "":
        lines.pop()  # the file ended with a newline: nothing cut
    elif lines:
        cut = lines.pop()
        warnings.append(f"{path.name}: last line {len(lines) + 1} has no newline (writer stopped mid-line): "
                        f"dropped {cut[:40]!r}")
    body = [ln for i, ln in enumerate(lines)
            if ln.strip() and not (i == 0 and ln.strip().lower().startswith(columns[0]))]
    try:  # fast path: every line is plain integers
        frame = pd.read_csv(io.StringIO("\n".join(body)), header=None, names=list(columns), dtype=np.int64,
                            engine="c") if body else pd.DataFrame({c: [] for c in columns}, dtype=np.int64)
        if frame.notna().all().all() and len(frame) == len(body):
            return LogTable(frame, warnings)
    except (ValueError, pd.errors.ParserError):
        pass
    parsers = [_flag if c == "dup" else _int for c in columns]
    rows: list[tuple[int, ...]] = []
    bad: list[int] = []
    for no, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or (no == 1 and line.lower().startswith(columns[0])):
            continue
        parts = line.split(",")
        if len(parts) != len(columns):
            bad.append(no)
            continue
        try:
            rows.append(tuple(p(v) for p, v in zip(parsers, parts, strict=True)))
        except ValueError:
            bad.append(no)
    if bad:
        shown = ", ".join(str(b) for b in bad[:10]) + (" ..." if len(bad) > 10 else "")
        warnings.append(f"{path.name}: {len(bad)} unreadable line(s) dropped (line {shown}); "
                        f"expected {','.join(columns)}")
    arr = np.array(rows, dtype=np.int64).reshape(-1, len(columns))
    frame = pd.DataFrame(arr, columns=list(columns))
    return LogTable(frame, warnings)


def read_publisher_log(path: Path) -> LogTable:
    return read_log(path, PUBLISHER_COLUMNS)


def read_subscriber_log(path: Path) -> LogTable:
    return read_log(path, SUBSCRIBER_COLUMNS)
