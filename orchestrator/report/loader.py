"""The report's reading of a results bundle: the bundle itself is read by orchestrator/results/bundle.py (one
reader, shared with the notebook API); here the per-message samples the report's statistics use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.model.axes import PERSISTENT
from orchestrator.results.bundle import (
    MESSAGE_COLUMNS,
    REQUIRED_MESSAGE_COLUMNS,
    Bundle,
    Cell,
    Incomplete,
    condition,
    load_bundle,
    read_manifest,
    read_messages,
    read_metrics,
    split_condition,
)

__all__ = ["MESSAGE_COLUMNS", "PERSISTENT", "REQUIRED_MESSAGE_COLUMNS", "Bundle", "Cell", "Incomplete", "condition",
           "delay_available", "delay_samples", "frame_samples", "jitter_samples", "load_bundle", "per_seq",
           "published_frame_len", "read_manifest", "read_messages", "read_metrics", "split_condition",
           "transit_samples"]

PUBLISHER_TO_BROKER = "publisher->broker"
BROKER_TO_SUBSCRIBER = "broker->subscriber"


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
