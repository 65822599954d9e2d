"""Read the publisher's send log, a fleet's send logs and the subscriber's receive log (CSV, one line per
message).

publisher:  ``seq,t_send_us,bytes``; at QoS 1/2 ``seq,t_send_us,bytes,ack_us,mqtt_bytes`` (vdevice: the time to
            PUBACK / PUBCOMP on its monotonic clock, empty when none came, and the PUBLISH's bytes)
fleet:      logs/fleet/<device>.csv, each ``seq,t_send_us,bytes,t_intended_us`` (read into one table
            with a ``device`` column taken from the file name)
subscriber: ``seq,t_recv_us,bytes,dup,device`` (``device``: the payload's id, empty when it names none);
            logs recorded before the device column, ``seq,t_recv_us,bytes,dup``, read as before (no
            ``device`` column in the table)
Every log is written line by line; a crash can leave a last line without its newline. That line is
dropped (its numbers may be cut short) and a warning says so; any other unreadable line is also
dropped and reported with its line number, never guessed.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.errors import TestbedError

PUBLISHER_COLUMNS = ("seq", "t_send_us", "bytes")
ACK_COLUMNS = ("ack_us", "mqtt_bytes")  # after those, in a QoS 1/2 send log (vdevice)
SUBSCRIBER_COLUMNS = ("seq", "t_recv_us", "bytes", "dup")
SUBSCRIBER_DEVICE_COLUMNS = (*SUBSCRIBER_COLUMNS, "device")
FLEET_SEND_COLUMNS = ("seq", "t_send_us", "bytes", "t_intended_us")
FLEET_COLUMNS = ("device", *FLEET_SEND_COLUMNS)
TEXT_COLUMNS = frozenset({"device"})
FLEET_CONNECTIONS = "connections.csv"  # in logs/fleet beside the send logs (analysis/fleet.py reads it)
FLEET_NOT_SEND_LOGS = frozenset({FLEET_CONNECTIONS})
DEVICE_FILE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no", ""}


@dataclass
class LogTable:
    """Rows in file order (the subscriber's order is arrival order) plus what was dropped."""

    frame: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def _int(text: str) -> int:
    return int(text.strip())


def _text(text: str) -> str:
    return text.strip()


def _flag(text: str) -> int:
    t = text.strip().lower()
    if t in _TRUE:
        return 1
    if t in _FALSE:
        return 0
    raise ValueError(text)


def _lines(path: Path) -> tuple[list[str], list[str]]:
    """The file's lines without a last one cut short (with a warning for it)."""
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
    return lines, warnings


def _body(lines: list[str], columns: tuple[str, ...]) -> list[str]:
    return [ln for i, ln in enumerate(lines)
            if ln.strip() and not (i == 0 and ln.strip().lower().startswith(columns[0]))]


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    if not TEXT_COLUMNS.intersection(columns):
        return pd.DataFrame({c: [] for c in columns}, dtype=np.int64)
    return pd.DataFrame({c: pd.Series([], dtype=str if c in TEXT_COLUMNS else np.int64) for c in columns})


def _fast(body: list[str], columns: tuple[str, ...]) -> pd.DataFrame | None:
    """Every line plain integers (and text where a column is text): one C parse, else None."""
    if not body:
        return _empty(columns)
    text = TEXT_COLUMNS.intersection(columns)
    try:
        if not text:
            frame = pd.read_csv(io.StringIO("\n".join(body)), header=None, names=list(columns), dtype=np.int64,
                                engine="c")
        else:
            frame = pd.read_csv(io.StringIO("\n".join(body)), header=None, names=list(columns), engine="c",
                                dtype={c: (str if c in text else np.int64) for c in columns}, na_filter=False)
    except (ValueError, pd.errors.ParserError):
        return None
    if frame.notna().all().all() and len(frame) == len(body):
        return frame
    return None


def _slow(lines: list[str], columns: tuple[str, ...], name: str) -> tuple[pd.DataFrame, list[str]]:
    """Line by line: unreadable lines dropped and reported by number."""
    parsers: list[Callable[[str], object]] = [_flag if c == "dup" else _text if c in TEXT_COLUMNS else _int
                                              for c in columns]
    rows: list[tuple[object, ...]] = []
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
    warnings: list[str] = []
    if bad:
        shown = ", ".join(str(b) for b in bad[:10]) + (" ..." if len(bad) > 10 else "")
        warnings.append(f"{name}: {len(bad)} unreadable line(s) dropped (line {shown}); "
                        f"expected {','.join(columns)}")
    if not TEXT_COLUMNS.intersection(columns):
        arr = np.array(rows, dtype=np.int64).reshape(-1, len(columns))
        return pd.DataFrame(arr, columns=list(columns)), warnings
    if not rows:
        return _empty(columns), warnings
    frame = pd.DataFrame.from_records(rows, columns=list(columns))
    for c in columns:
        frame[c] = frame[c].astype(str if c in TEXT_COLUMNS else np.int64)
    return frame, warnings


def _parse(lines: list[str], columns: tuple[str, ...], name: str) -> tuple[pd.DataFrame, list[str]]:
    frame = _fast(_body(lines, columns), columns)
    return (frame, []) if frame is not None else _slow(lines, columns, name)


def read_log(path: Path, columns: tuple[str, ...]) -> LogTable:
    """Parse one log. The header line is optional; ``dup`` accepts 0/1/true/false."""
    lines, warnings = _lines(path)
    frame, more = _parse(lines, columns, path.name)
    return LogTable(frame, warnings + more)


def read_publisher_log(path: Path) -> LogTable:
    """seq,t_send_us,bytes; a QoS 1/2 log's ack columns (``ACK_COLUMNS``) are left to read_publisher_acks."""
    lines, warnings = _lines(path)
    if lines and lines[0].strip().lower().split(",")[3:] == list(ACK_COLUMNS):
        lines = [",".join(ln.split(",")[:len(PUBLISHER_COLUMNS)]) for ln in lines]
    frame, more = _parse(lines, PUBLISHER_COLUMNS, path.name)
    return LogTable(frame, warnings + more)


def read_publisher_acks(path: Path) -> pd.DataFrame | None:
    """A QoS 1/2 send log's per-message ack columns: seq, ack_us (the time to PUBACK / PUBCOMP on the device's
    monotonic clock, missing when none came) and mqtt_bytes (the PUBLISH's); None for a log without them."""
    lines, _ = _lines(path)
    if not lines or lines[0].strip().lower().split(",")[3:] != list(ACK_COLUMNS):
        return None
    rows = [ln.split(",") for ln in lines[1:] if ln.count(",") == len(PUBLISHER_COLUMNS) + len(ACK_COLUMNS) - 1]
    return pd.DataFrame({
        "seq": pd.array([int(r[0]) for r in rows], dtype="Int64"),
        "ack_us": pd.array([int(r[3]) if r[3].strip() else None for r in rows], dtype="Int64"),
        "mqtt_bytes": pd.array([int(r[4]) for r in rows], dtype="Int64"),
    })


def subscriber_columns(lines: list[str]) -> tuple[str, ...]:
    """Which of the subscriber's two formats: from the header, else from the first line's field count."""
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if first.lower().startswith("seq"):
        return SUBSCRIBER_DEVICE_COLUMNS if "device" in first.lower().split(",") else SUBSCRIBER_COLUMNS
    return SUBSCRIBER_DEVICE_COLUMNS if first.count(",") == len(SUBSCRIBER_COLUMNS) else SUBSCRIBER_COLUMNS


def read_subscriber_log(path: Path) -> LogTable:
    """The receive log in either format; a ``device`` column only when the log has one."""
    lines, warnings = _lines(path)
    frame, more = _parse(lines, subscriber_columns(lines), path.name)
    return LogTable(frame, warnings + more)


def fleet_send_logs(folder: Path) -> list[Path]:
    """A fleet's per-device send logs, <device>.csv, sorted by name (connections.csv is not one)."""
    if not folder.is_dir():
        raise TestbedError(f"fleet send logs: {folder} is not a folder")
    return sorted(p for p in folder.glob("*.csv")
                  if p.name not in FLEET_NOT_SEND_LOGS and DEVICE_FILE.fullmatch(p.stem))


def read_fleet_logs(folder: Path) -> LogTable:
    """Every device's send log in one table (``device`` from the file name, then the log's columns), device
    by device in name order. One C parse over all of them; a folder with an unreadable line anywhere is
    read file by file instead (the same rules as one log)."""
    files = fleet_send_logs(folder)
    warnings: list[str] = [] if files else [f"{folder.name}: no device send log (<device>.csv) in it"]
    parts: list[tuple[str, list[str], list[str]]] = []
    for path in files:
        lines, w = _lines(path)
        warnings += w
        parts.append((path.stem, lines, _body(lines, FLEET_SEND_COLUMNS)))
    joined = [f"{device},{ln}" for device, _, body in parts for ln in body]
    frame = _fast(joined, FLEET_COLUMNS)
    if frame is not None:
        return LogTable(frame, warnings)
    frames = []
    for (device, lines, _), path in zip(parts, files, strict=True):
        one, more = _parse(lines, FLEET_SEND_COLUMNS, f"{folder.name}/{path.name}")
        warnings += more
        frames.append(one.assign(device=device)[list(FLEET_COLUMNS)])
    return LogTable(pd.concat(frames, ignore_index=True) if frames else _empty(FLEET_COLUMNS), warnings)
