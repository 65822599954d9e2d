"""Read a results bundle: manifest.json and runs/<cell>/{cell.json, metrics.json, per_message.csv}.

Only cells whose status is "ok" are analysed; failed and interrupted cells (and run folders
without a cell.json) are kept as excluded entries so the report can list them. The schema of
manifest.json, metrics.json and cell.json (orchestrator/model/cell.py, the model measure/ writes) is checked
(newer refused, older migrated) by results/schema.py; a broken file of an "ok" cell is an error naming the file
and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.errors import TestbedError
from orchestrator.model.cell import PERSISTENT, CellRecord
from orchestrator.model.layout import RUNS, BundleLayout, Layout
from orchestrator.results.cells import read_cell_record
from orchestrator.results.manifest import load_manifest
from orchestrator.results.schema import read_versioned

PUBLISHER_TO_BROKER = "publisher->broker"
BROKER_TO_SUBSCRIBER = "broker->subscriber"
MESSAGE_COLUMNS = ("device", "seq", "delay_ms", "broker_transit_ms", "frame_len", "msgs_in_frame", "dup",
                   "direction")  # device: a fleet's (its messages are (device, seq))
REQUIRED_MESSAGE_COLUMNS = ("seq", "delay_ms")
_JOIN = " + "


def condition(impairment: str, connection: str = PERSISTENT, devices: int = 1) -> str:
    """The cells' shared conditions, as the report groups them: the impairment, the connection mode when it
    is not the study's persistent one (``none + resume-id``), a fleet's size (``none + 1000 devices``)."""
    parts = [impairment, *([connection] if connection != PERSISTENT else []),
             *([f"{devices} devices"] if devices > 1 else [])]
    return _JOIN.join(parts)


def split_condition(text: str) -> tuple[str, str]:
    """(impairment, connection mode) of a :func:`condition` (a fleet's: the mode and its size)."""
    impairment, _, connection = text.partition(_JOIN)
    return impairment, connection or PERSISTENT


@dataclass
class Cell:
    record: CellRecord
    folder: Path
    metrics: dict[str, Any] | None = None
    messages: pd.DataFrame | None = None

    @property
    def ok(self) -> bool:
        return self.record.status == "ok"

    @property
    def group(self) -> tuple[int, str, str]:
        """(payload, condition, scenario): the cells that differ only by repeat (the condition: the
        impairment, the connection mode when it is not persistent, a fleet's size)."""
        return (self.record.payload,
                condition(self.record.impairment, self.record.connection_mode, self.record.devices),
                self.record.scenario)


@dataclass(frozen=True)
class Incomplete:
    """A run folder that cannot be read as a cell (e.g. the sweep stopped before cell.json)."""

    folder: str
    reason: str


@dataclass
class Bundle:
    root: Path
    manifest: dict[str, Any]
    cells: list[Cell] = field(default_factory=list)
    incomplete: list[Incomplete] = field(default_factory=list)

    @property
    def ok_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.ok]

    @property
    def excluded_cells(self) -> list[Cell]:
        return [c for c in self.cells if not c.ok]


def read_manifest(root: Path) -> dict[str, Any]:
    return load_manifest(root)


def read_metrics(path: Path) -> dict[str, Any]:
    return read_versioned(path, "metrics")


def read_messages(path: Path) -> pd.DataFrame:
    """The columns of per_message.csv the report uses (others are ignored)."""
    try:
        df = pd.read_csv(path, usecols=lambda c: c in MESSAGE_COLUMNS, dtype={"device": str})
    except FileNotFoundError:
        raise TestbedError(f"{path}: missing") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TestbedError(f"{path}: cannot read as CSV: {exc}") from None
    missing = [c for c in REQUIRED_MESSAGE_COLUMNS if c not in df.columns]
    if missing:
        raise TestbedError(f"{path}: missing column(s): {', '.join(missing)}")
    for column in ("seq", "delay_ms", "broker_transit_ms", "frame_len", "msgs_in_frame"):
        if column in df.columns:
            converted = pd.to_numeric(df[column], errors="coerce")
            bad = converted.isna() & df[column].notna()
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # header is line 1
                raise TestbedError(f"{path}:{row}: {column}: not a number: {df[column].iloc[row - 2]!r}")
            df[column] = converted.astype(float)
    return df


def load_bundle(root: Path) -> Bundle:
    """Read every run folder of ``root``; failed/interrupted cells are kept but not read further."""
    if not root.is_dir():
        raise TestbedError(f"{root}: not a results bundle (no such folder)")
    manifest = read_manifest(root)
    layout = BundleLayout(root)
    if not layout.runs.is_dir():
        raise TestbedError(f"{layout.runs}: missing; a bundle keeps one folder per cell under {RUNS}/")
    bundle = Bundle(root=root, manifest=manifest)
    for folder in layout.run_folders():
        run = Layout(folder)
        if not run.cell.is_file():
            bundle.incomplete.append(Incomplete(folder.name, f"no {run.cell.name} (the cell never finished)"))
            continue
        cell = Cell(record=read_cell_record(run.cell), folder=folder)
        if cell.ok:
            cell.metrics = read_metrics(run.metrics)
            cell.messages = read_messages(run.per_message)
        bundle.cells.append(cell)
    if not bundle.cells and not bundle.incomplete:
        raise TestbedError(f"{layout.runs}: no run folders; nothing to report")
    return bundle


# ---------------------------------------------------------------- per-message samples
def _truthy(series: pd.Series) -> pd.Series:
    if pd.api.types.is_bool_dtype(series):
        return series.fillna(False).astype(bool)
    if pd.api.types.is_numeric_dtype(series):
        return series.fillna(0) != 0
    return series.astype(str).str.strip().str.lower().isin(["true", "1", "yes"])


def per_seq(df: pd.DataFrame, column: str) -> np.ndarray:
    """One value of ``column`` per sequence number, in seq order (a fleet's per_message.csv, with a
    ``device`` column: per (device, seq), in device then seq order).

    Works on both layouts of per_message.csv: one row per message (``dup`` then only says the
    message also arrived again) and one row per copy/leg (rows flagged ``dup`` are used only when
    the seq has no other row with a value).
    """
    if column not in df.columns or "seq" not in df.columns:
        return np.empty(0)
    keys = ["device", "seq"] if "device" in df.columns else ["seq"]
    rows = df[[*keys, column]].assign(_dup=_truthy(df["dup"]) if "dup" in df.columns else False)
    rows = rows[rows[column].notna() & rows["seq"].notna()].sort_values([*keys, "_dup"], kind="stable")
    return rows.groupby(keys, sort=True)[column].first().to_numpy(dtype=float)


def published_frame_len(df: pd.DataFrame) -> np.ndarray:
    """Wire bytes of each PUBLISH from the publisher to the broker that had its frame to itself.

    Frames carrying several PUBLISH (Nagle at session start) are left out: their length is not
    one message's.
    """
    if "frame_len" not in df.columns:
        return np.empty(0)
    if "direction" in df.columns:
        df = df[df["direction"].astype(str) == PUBLISHER_TO_BROKER]
    if "msgs_in_frame" in df.columns:
        df = df[df["msgs_in_frame"].isna() | (df["msgs_in_frame"] == 1)]
    return per_seq(df, "frame_len")


def delay_available(metrics: Mapping[str, Any]) -> bool:
    section = metrics.get("delay_ms")
    return isinstance(section, Mapping) and section.get("available") is not False


def delay_samples(cell: Cell) -> np.ndarray:
    """One-way delays (ms), seq order; empty when the run says delay is unavailable."""
    if cell.messages is None or cell.metrics is None or not delay_available(cell.metrics):
        return np.empty(0)
    return per_seq(cell.messages, "delay_ms")


def transit_samples(cell: Cell) -> np.ndarray:
    return np.empty(0) if cell.messages is None else per_seq(cell.messages, "broker_transit_ms")


def jitter_samples(cell: Cell) -> np.ndarray:
    """|delay[i] - delay[i-1]| in sequence order (the per-message terms of the mean jitter; a fleet's within
    each device)."""
    delays = delay_samples(cell)
    if delays.size < 2:
        return np.empty(0)
    df = cell.messages
    if df is None or "device" not in df.columns:
        return np.abs(np.diff(delays))
    rows = df[df["delay_ms"].notna() & df["seq"].notna()].drop_duplicates(["device", "seq"])
    devices = rows.sort_values(["device", "seq"], kind="stable")["device"].to_numpy()
    same = devices[1:] == devices[:-1] if devices.size == delays.size else np.ones(delays.size - 1, dtype=bool)
    return np.abs(np.diff(delays))[same]


def frame_samples(cell: Cell) -> np.ndarray:
    return np.empty(0) if cell.messages is None else published_frame_len(cell.messages)
