"""The notebook API: a results bundle as its manifest and typed pandas frames (docs/notebook.md).

    from orchestrator.results import load
    bundle = load("results/20261130T020000Z-demo")
    bundle.cells, bundle.messages, bundle.packets, bundle.summary, bundle.comparisons, bundle.connections,
    bundle.devices

The run folders are read by the one reader of a bundle, orchestrator/results/bundle.py (the report reads through
it too), so a cell's files are checked the same way; this module only gives the frames their types. Every frame
is read when first asked for and kept. Types: counts, sizes, sequence numbers and microsecond timestamps are
``Int64`` (pandas' nullable integer), durations and rates ``float64``, names (scenario, status, cell id, ...)
``category``, free text ``string``, flags ``boolean``, wall-clock times ``datetime64[ns, UTC]``. A value the
bundle does not have (n/a in summary.csv, an empty cell of a CSV) stays missing (NaN, <NA>, NaT): never a
number made up. Units: in the column names (``_ms``, ``_us``, ``_s``, ``_len``, ``_bytes``, ``_bps``, ``_pct``)
and, for every column that has one, in ``frame.attrs["units"]`` (column -> unit); comparisons.csv carries its
unit per row (the ``unit`` column).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import numpy as np
import pandas as pd

from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES
from orchestrator.model.layout import BundleLayout, Layout
from orchestrator.results.bundle import Bundle, Cell, load_bundle

UNITS = "units"  # the key of DataFrame.attrs holding {column: unit}
NA_TEXT = ("n/a",)  # how summary.csv and comparisons.csv write a value that is not available
CELL = "cell_id"

# Integers by name (also when a missing value made pandas read the column as floats): counts, sizes, ids; an
# axis's column is typed as the axis table says (AXIS_DTYPES, below), never by a name restated here.
INT_NAMES = frozenset({
    "seq", "frame", "stream", "dup", "recv_count", "msgs_in_frame", "in_frame", "out_frame", "out_msgs_in_frame",
    "sent", "received", "lost", "connected", "messages", "duplicates",
    "out_of_order", "tcp_retransmissions", "tcp_flags", "tcp_seq", "tcp_ack", "sack_le", "sack_re", "tls_overhead",
    "tiphon_delay", "tiphon_jitter", "tiphon_loss", "publisher_exit_code", "index",
})
INT_SUFFIXES = ("_us", "_len", "_bytes", "_count", "_port", "_n", "_c2s", "_s2c", "_seed", "_resamples")
INT_PREFIXES = ("n_", "repeats_", "samples_", "received_", "wire_", "payload_", "retransmitted_", "alert_records_")
FLOAT_SUFFIXES = ("_ms", "_s", "_pct", "_bps", "_p")
TEXT_NAMES = frozenset({"error", "warnings", "note", "lost_seqs", "lost_at", "samples_note", "evidence", "verdict",
                        "end_evidence", "alerts_client", "alerts_server"})
ISO_TIMES = frozenset({"started_utc", "finished_utc", "created_utc"})
EPOCH_SECONDS = frozenset({"time", "syn_time"})  # the capture's time of a frame (packets.csv), of a SYN
UNIT_SUFFIXES = (("_ms", "ms"), ("_us", "us"), ("_s", "s"), ("_bps", "bit/s"), ("_pct", "%"), ("_len", "B"),
                 ("_bytes", "B"), ("_c2s", "B"), ("_s2c", "B"))
UNIT_PREFIXES = (("wire_", "B"), ("payload_", "B"), ("retransmitted_", "B"))  # connections.csv: bytes per side
UNIT_NAMES = {"tls_overhead": "B", **{a.name: a.unit for a in AXES if a.unit}}


def _is_int_name(name: str) -> bool:
    if name in AXIS_DTYPES:
        return AXIS_DTYPES[name] == "Int64"
    if name.endswith(FLOAT_SUFFIXES) and not name.endswith(INT_SUFFIXES):
        return False
    return name in INT_NAMES or name.endswith(INT_SUFFIXES) or name.startswith(INT_PREFIXES)


def unit_of(name: str) -> str | None:
    """The unit of a column, from its name (None: a count, a name or a flag)."""
    if name in UNIT_NAMES:
        return UNIT_NAMES[name]
    by_suffix = next((unit for suffix, unit in UNIT_SUFFIXES if name.endswith(suffix)), None)
    return by_suffix or next((unit for prefix, unit in UNIT_PREFIXES if name.startswith(prefix)), None)


def _as_bool(series: pd.Series) -> pd.Series | None:
    """A column of true/false (bools, or the texts True/False) as ``boolean``; None when it is something else."""
    values = set(series.dropna().astype(str).str.strip().str.lower())
    if not values or not values <= {"true", "false"}:
        return None
    return series.map(lambda v: None if pd.isna(v) else str(v).strip().lower() == "true").astype("boolean")


def _as_int(series: pd.Series) -> pd.Series | None:
    """A numeric column whose every value is a whole number as ``Int64``; None when one is not (then it stays
    float: never rounded)."""
    if series.dtype == object and series.isna().all():
        return None  # nothing says what it would hold (a spec's serial_port that no cell set)
    numbers = pd.to_numeric(series, errors="coerce")
    if (numbers.isna() & series.notna()).any():
        return None
    present = numbers.dropna().to_numpy(dtype=float)
    if present.size and not np.all(np.isfinite(present) & (present == np.round(present))):
        return None
    return numbers.astype("Int64")


def _typed_column(name: str, series: pd.Series) -> pd.Series:
    if isinstance(series.dtype, pd.CategoricalDtype) or pd.api.types.is_datetime64_any_dtype(series):
        return series  # typed already (a cell id in the bundle's cell order)
    if name in ISO_TIMES:
        return pd.to_datetime(series, utc=True, errors="coerce").astype("datetime64[ns, UTC]")
    if name in TEXT_NAMES:
        return series.astype("string")
    if name in EPOCH_SECONDS and pd.api.types.is_numeric_dtype(series):
        return pd.to_datetime(series, unit="s", utc=True)
    if pd.api.types.is_bool_dtype(series) or series.dtype == object:
        flags = _as_bool(series)
        if flags is not None:
            return flags
    if _is_int_name(name):
        whole = _as_int(series)
        if whole is not None:
            return whole
    if pd.api.types.is_numeric_dtype(series):
        return series.astype("float64")
    return series.astype("category")


def typed(df: pd.DataFrame, known: Mapping[str, str] | None = None) -> pd.DataFrame:
    """``df`` with every column given its type (``known``: column -> dtype where the model says it, else from
    the column's name and values, see the module's doc) and ``attrs["units"]`` set."""
    known = known or {}
    out = pd.DataFrame({name: df[name].astype(known[str(name)]) if str(name) in known
                        else _typed_column(str(name), df[name]) for name in df.columns}, index=df.index)
    out.attrs[UNITS] = {str(c): u for c in out.columns if (u := unit_of(str(c))) is not None}
    return out


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV of a bundle or run folder as written (``n/a`` read as missing); an error names the file."""
    try:
        return pd.read_csv(path, na_values=list(NA_TEXT), dtype={"device": str})
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TestbedError(f"{path}: cannot read as CSV: {exc}") from None


def read_table(path: Path) -> pd.DataFrame:
    return typed(read_csv(path))


def _concat(frames: Iterable[tuple[str, pd.DataFrame]], cell_order: list[str]) -> pd.DataFrame | None:
    """One frame of every cell's rows, the cell's id first (a category in the bundle's cell order)."""
    parts = [df.assign(**{CELL: cell_id}) for cell_id, df in frames]
    if not parts:
        return None
    whole = pd.concat(parts, ignore_index=True)
    whole.insert(0, CELL, pd.Categorical(whole.pop(CELL), categories=cell_order))
    return whole


def axis_dtype(kind: Any) -> str:
    """The dtype of an axis's values, from its Python type (a Literal of numbers: Int64; of names: category)."""
    choices = [a for a in get_args(kind) if a is not type(None)]
    if get_origin(kind) is Literal:
        return "Int64" if all(isinstance(c, int) and not isinstance(c, bool) for c in choices) else "category"
    if len(choices) == 1:
        return axis_dtype(choices[0])
    return {int: "Int64", float: "float64", bool: "boolean"}.get(kind, "category")


AXIS_DTYPES = {a.name: axis_dtype(a.type) for a in AXES}
RECORD_DTYPES = {"received": "Int64", "publisher_exit_code": "Int64", "error": "string"}


def _spec_values(cell: Cell, taken: set[str]) -> dict[str, Any]:
    """The axis values the cell ran with (its RunSpec, when the cell kept one): the scalar ones not already
    columns of the cells frame."""
    spec = cell.record.spec or {}
    return {k: v for k, v in spec.items() if k not in taken and (v is None or isinstance(v, str | int | float))}


def cell_row(cell: Cell) -> dict[str, Any]:
    record = cell.record
    row: dict[str, Any] = {
        CELL: record.cell_id, "scenario": record.scenario, "payload": record.payload,
        "impairment": record.impairment, "connection": record.connection_mode, "devices": record.devices,
        "repeat": record.repeat, "condition": cell.condition, "status": record.status, "error": record.error,
        "started_utc": record.started_utc, "finished_utc": record.finished_utc, "received": record.received,
        "publisher_exit_code": record.publisher_exit_code, "folder": cell.folder.name,
    }
    return {**row, **_spec_values(cell, set(row))}


class ResultsBundle:
    """A results bundle for a notebook: the manifest, the cells, and the typed frames (see the module's doc).

    ``raw`` is the bundle as the shared reader gives it (each cell's record, metrics.json and per_message.csv),
    ``metrics`` each ok cell's metrics.json by cell id, ``incomplete`` the run folders without a cell.json.
    """

    def __init__(self, raw: Bundle) -> None:
        self.raw = raw
        self.root = raw.root
        self.manifest = raw.manifest
        self.incomplete = list(raw.incomplete)
        self.metrics = {c.record.cell_id: c.metrics for c in raw.ok_cells if c.metrics is not None}

    def __repr__(self) -> str:
        ok = len(self.raw.ok_cells)
        return f"ResultsBundle({self.root.name!r}: {len(self.raw.cells)} cells, {ok} ok)"

    @property
    def _order(self) -> list[str]:
        return [c.record.cell_id for c in self.raw.cells]

    def _per_cell(self, path: Callable[[Layout], Path]) -> pd.DataFrame | None:
        """Every ok cell's copy of one CSV of the run folder, typed, in one frame (None: no cell has it)."""
        found = ((c.record.cell_id, path(Layout(c.folder))) for c in self.raw.ok_cells)
        frame = _concat(((cell_id, read_csv(p)) for cell_id, p in found if p.is_file()), self._order)
        return None if frame is None else typed(frame)

    @cached_property
    def cells(self) -> pd.DataFrame:
        """One row per cell (failed and interrupted ones too, with their status and error): its id, its axis
        values, its condition as the report groups cells, its status and times."""
        rows = pd.DataFrame([cell_row(c) for c in self.raw.cells])
        frame = typed(rows, {**AXIS_DTYPES, **RECORD_DTYPES})
        frame[CELL] = pd.Categorical(frame[CELL].astype(str), categories=self._order)
        return frame

    @cached_property
    def messages(self) -> pd.DataFrame | None:
        """Every ok cell's per_message.csv (one row per message; a fleet's per (device, seq))."""
        frames = ((c.record.cell_id, c.messages) for c in self.raw.ok_cells if c.messages is not None)
        frame = _concat(frames, self._order)
        return None if frame is None else typed(frame)

    @cached_property
    def packets(self) -> pd.DataFrame | None:
        """Every ok cell's packets.csv (one row per captured frame; ``time`` is the capture's, in UTC)."""
        return self._per_cell(lambda run: run.packets)

    @cached_property
    def connections(self) -> pd.DataFrame | None:
        """The publisher's connections as the capture shows them (cells that reconnect; None: none did)."""
        return self._per_cell(lambda run: run.connections)

    @cached_property
    def devices(self) -> pd.DataFrame | None:
        """A fleet's per-device table, devices.csv (None: the bundle has no fleet cell)."""
        return self._per_cell(lambda run: run.devices)

    @cached_property
    def summary(self) -> pd.DataFrame | None:
        """summary.csv, one row per cell (None: the bundle's report was never built, `testbed report` writes it)."""
        path = BundleLayout(self.root).summary
        return read_table(path) if path.is_file() else None

    @cached_property
    def comparisons(self) -> pd.DataFrame | None:
        """comparisons.csv, each scenario against the baseline per metric (its unit in the ``unit`` column)."""
        path = BundleLayout(self.root).comparisons
        return read_table(path) if path.is_file() else None


def load(path: str | Path) -> ResultsBundle:
    """Read the results bundle at ``path`` (a folder holding manifest.json and runs/) for a notebook. Its frames
    are read when first used, from the absolute path: a later change of the working folder does not matter."""
    return ResultsBundle(load_bundle(Path(path).expanduser().resolve(), message_columns=None))
