"""A current trace from a power analyser's CSV export, read into seconds and mA (issue 42, part 3).

Formats and the header variants each accepts (the importer names the one it read):

- ``ppk2``: Nordic's Power Profiler app (nRF Connect for Desktop) exporting a Power Profiler Kit II recording:
  ``Timestamp(ms),Current(uA)`` alone; with the digital inputs as one column of eight 0/1 characters, D0 first,
  ``...,D0-D7``; as eight columns ``...,D0,D1,...,D7``; or, as older versions of the app wrote, an integer bit mask
  ``...,Bits`` (bit 0 = D0). Sources: the app's export code, NordicSemiconductor/pc-nrfconnect-ppk
  (``Timestamp(ms),Current(uA)${options.bits ? ',Bits' : ''}``), and users' readers of PPK2 exports with
  ``Timestamp(ms),Current(uA),D0-D7`` and with ``D0,...,D7`` columns (public code found by the search tool).
- ``otii``: Qoitech's Otii exporting a recording's channels as CSV: a time column ``Timestamp (s)`` or
  ``Time (s)`` (or ms), a current column ending ``current (A)`` (``Main current (A)``, optionally after the
  device's name and `` - ``; mA, uA, nA too) and the digital inputs as ``GPI1``/``GPI2`` columns (any header
  naming ``GPI`` or ``digital``). No stored copy of an Otii export was found to check these names against: they
  follow the channel names Otii shows (Main current, GPI1, GPI2), and the unit must be in the header.
- ``csv``: any CSV whose header names its units: a time column ``time (s|ms|us)``, a current column
  ``current (A|mA|uA|nA)`` and optionally a 0/1 column ``marker``.

Refused, naming what is wrong: a header that is not the format's, a current column in a unit that is not a current
(W, V, ...), a non-numeric row, timestamps that do not increase, fewer than ``MIN_SAMPLES`` samples.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.errors import TestbedError

FORMATS = ("ppk2", "otii", "csv")
MIN_SAMPLES = 100
PPK2_TIME, PPK2_CURRENT = "Timestamp(ms)", "Current(uA)"
PPK2_DIGITAL = ("", "D0-D7", ",".join(f"D{i}" for i in range(8)), "Bits")
PPK2_HEADERS = tuple(",".join(p for p in (PPK2_TIME, PPK2_CURRENT, d) if p) for d in PPK2_DIGITAL)
TO_MA = {"a": 1e3, "ma": 1.0, "ua": 1e-3, "µa": 1e-3, "na": 1e-6}
TO_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
UNIT = re.compile(r"^(?P<name>.*?)\s*[\(\[](?P<unit>[^\)\]]+)[\)\]]\s*$")


@dataclass(frozen=True)
class Trace:
    """Samples on the instrument's own clock (seconds from its first sample), current in mA, and the marker."""

    time_s: np.ndarray
    current_ma: np.ndarray
    marker: np.ndarray | None  # 0/1 per sample: the channel the firmware drives, where there is one
    fmt: str
    header: str  # the header variant read, as the file spelled it
    marker_channel: str | None

    @property
    def period_s(self) -> float:
        return float(np.median(np.diff(self.time_s)))


def _refuse(path: Path, what: str, hint: str) -> TestbedError:
    return TestbedError(f"{path}: {what}", hint=hint)


def _unit(path: Path, column: str, table: dict[str, float], kind: str) -> float:
    found = UNIT.match(column)
    unit = found.group("unit").strip().lower() if found else ""
    if unit not in table:
        raise _refuse(path, f"the {kind} column {column!r} is not in {'/'.join(table)}",
                      f"export the trace with its {kind} in one of those units, its unit in the header")
    return table[unit]


def _numbers(path: Path, frame: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() | ~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
    if bool(bad.any()):
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise _refuse(path, f"line {row + 2}: {column} is {frame[column].iloc[row]!r}, not a number",
                      "the export is cut or is not this instrument's")
    return values.to_numpy(dtype=float)


def _ppk2_marker(frame: pd.DataFrame, header: str, channel: str) -> np.ndarray | None:
    bit = int(channel[1:]) if re.fullmatch(r"D[0-7]", channel) else 0
    if header.endswith("D0-D7"):
        text = frame["D0-D7"].astype(str).str.zfill(8)
        return (text.str[bit] == "1").to_numpy(dtype=np.int8)
    if header.endswith("Bits"):
        bits = pd.to_numeric(frame["Bits"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
        return ((bits >> bit) & 1).astype(np.int8)
    if header.endswith("D7"):
        return (pd.to_numeric(frame[f"D{bit}"], errors="coerce").fillna(0) > 0).to_numpy(dtype=np.int8)
    return None


def _read_frame(path: Path, text: str, digital: str | None = None) -> pd.DataFrame:
    try:
        return pd.read_csv(io.StringIO(text), dtype={digital: str} if digital else None, skipinitialspace=True)
    except (pd.errors.ParserError, ValueError) as exc:
        raise _refuse(path, f"not a CSV table ({str(exc).splitlines()[0]})", "export the trace as CSV") from exc


def _ppk2(path: Path, text: str, header: str, channel: str | None) -> Trace:
    if header not in PPK2_HEADERS:
        raise _refuse(path, f"not a PPK2 export: its header is {header[:120]!r}",
                      f"a Power Profiler export starts with one of: {'; '.join(PPK2_HEADERS)}")
    frame = _read_frame(path, text, "D0-D7" if header.endswith("D0-D7") else None)
    time_s = _numbers(path, frame, PPK2_TIME) * 1e-3
    current = _numbers(path, frame, PPK2_CURRENT) * 1e-3
    marker = _ppk2_marker(frame, header, channel or "D0")
    return _checked(path, Trace(time_s, current, marker, "ppk2", header,
                                (channel or "D0") if marker is not None else None))


def _columns(header: str) -> list[str]:
    return [c.strip().strip('"') for c in header.split(",")]


def _pick(columns: list[str], pattern: str) -> str | None:
    return next((c for c in columns if re.search(pattern, c, re.IGNORECASE)), None)


def _labelled(path: Path, text: str, header: str, fmt: str, channel: str | None) -> Trace:
    columns = _columns(header)
    time_col = _pick(columns, r"^(timestamp|time)\b")
    current_col = _pick(columns, r"current") if fmt == "otii" else _pick(columns, r"^current\b")
    digital = (r"gpi|digital" if fmt == "otii" else r"^marker$") if channel is None else re.escape(channel)
    marker_col = _pick(columns, digital)
    if time_col is None or current_col is None:
        want = ("a 'Timestamp (s)' and a 'Main current (A)' column" if fmt == "otii"
                else "a 'time (s)' and a 'current (mA)' column")
        raise _refuse(path, f"not an {fmt} trace: its header is {header[:120]!r}", f"the header needs {want}")
    if channel is not None and marker_col is None:
        raise _refuse(path, f"no column {channel!r} in the header {header[:120]!r}", "name a column it has")
    frame = _read_frame(path, text)
    frame.columns = columns
    time_s = _numbers(path, frame, time_col) * _unit(path, time_col, TO_S, "time")
    current = _numbers(path, frame, current_col) * _unit(path, current_col, TO_MA, "current")
    marker = (_numbers(path, frame, marker_col) > 0.5).astype(np.int8) if marker_col else None
    return _checked(path, Trace(time_s - time_s[0], current, marker, fmt, header, marker_col))


def _checked(path: Path, trace: Trace) -> Trace:
    n = trace.time_s.size
    if n < MIN_SAMPLES:
        raise _refuse(path, f"{n} samples, fewer than {MIN_SAMPLES}", "record the whole run")
    steps = np.diff(trace.time_s)
    if bool((steps <= 0).any()):
        row = int(np.flatnonzero(steps <= 0)[0])
        raise _refuse(path, f"line {row + 3}: the time does not increase ({trace.time_s[row + 1]:.9g} s after "
                            f"{trace.time_s[row]:.9g} s)", "export one recording, unsorted rows are not read")
    return Trace(trace.time_s - trace.time_s[0], trace.current_ma, trace.marker, trace.fmt, trace.header,
                 trace.marker_channel)


def read_trace(path: Path, fmt: str, marker_channel: str | None = None) -> Trace:
    """The trace in ``path`` as ``fmt`` exports it; refused naming what is wrong."""
    if fmt not in FORMATS:
        raise TestbedError(f"unknown trace format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TestbedError(f"{path}: cannot read the trace ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise _refuse(path, "not a text CSV file", f"export the trace as CSV ({fmt})") from exc
    header = text.split("\n", 1)[0].strip().rstrip("\r")
    if not header:
        raise _refuse(path, "empty", "export the recording as CSV")
    if fmt == "ppk2":
        return _ppk2(path, text, header, marker_channel)
    if header in PPK2_HEADERS:
        raise _refuse(path, f"not an {fmt} trace: its header {header!r} is a PPK2 export's", "use --format ppk2")
    return _labelled(path, text, header, fmt, marker_channel)
