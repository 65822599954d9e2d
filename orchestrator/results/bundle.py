"""Read a results bundle: manifest.json and runs/<cell>/{cell.json, metrics.json, per_message.csv}.

The one reader of a bundle's run folders: the report (orchestrator/report/loader.py) and the notebook API
(orchestrator/results/notebook.py) both read through it. Only cells whose status is "ok" are read further;
failed and interrupted cells (and run folders without a cell.json) are kept as excluded entries so the report
can list them. The schema of manifest.json, metrics.json and cell.json (orchestrator/model/cell.py, the model
measure/ writes) is checked (newer refused, older migrated) by results/schema.py; a broken file of an "ok" cell
is an error naming the file and field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES, PERSISTENT, AxisTable
from orchestrator.model.cell import CellRecord
from orchestrator.model.layout import RUNS, BundleLayout, Layout
from orchestrator.results.cells import read_cell_record
from orchestrator.results.manifest import load_manifest
from orchestrator.results.schema import read_versioned

MESSAGE_COLUMNS = ("device", "seq", "delay_ms", "broker_transit_ms", "frame_len", "msgs_in_frame", "dup",
                   "direction")  # device: a fleet's (its messages are (device, seq))
REQUIRED_MESSAGE_COLUMNS = ("seq", "delay_ms")
NUMERIC_MESSAGE_COLUMNS = ("seq", "delay_ms", "broker_transit_ms", "frame_len", "msgs_in_frame")
_JOIN = " + "


def condition(impairment: str, connection: str = PERSISTENT, devices: int = AXES["devices"].default, protocol: str = "",
              table: AxisTable = AXES) -> str:
    """A condition's name from its usual parts (the report's lookups of one condition from another):
    :func:`condition_of` of these values, with ``protocol`` (:func:`protocol`'s text) as its last part."""
    return _name({"impairment": impairment, "connection": connection, "devices": devices}, protocol, table)


def condition_of(values: Mapping[str, Any], table: AxisTable = AXES) -> str:
    """The cells' shared conditions, as the report groups them, named by the axes that name one
    (``Axis.names`` in orchestrator/model/axes.py, every sweep axis among them): the impairment, the
    connection mode when it is not the study's persistent one (``none + resume-id``), a fleet's size
    (``none + 1000 devices``), then the MQTT protocol when it is not the study's (:func:`protocol`)."""
    return _name(values, protocol(values, table), table)


def _name(values: Mapping[str, Any], protocol: str, table: AxisTable) -> str:
    parts = [table[a.name].word(table.value(values, a.name)) for a in table.condition_axes("own")]
    return _JOIN.join([p for p in parts if p] + ([protocol] if protocol else []))


def protocol(spec: Mapping[str, Any] | None, table: AxisTable = AXES) -> str:
    """What of the MQTT protocol (and the device's stack) a cell ran other than the study's QoS 0, MQTT 3.1.1,
    clean session: e.g. ``qos1``, ``qos2 mqtt5 alias``, ``qos1 persistent-session inflight8`` ("" for the
    study's). Cells that differ in it are different conditions, never repeats of one another."""
    s = spec or {}
    words = [a.word(table.value(s, a.name)) for a in table.condition_axes("protocol")]
    return " ".join(w for w in words if w)


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
    table: AxisTable = field(default=AXES, repr=False, compare=False)  # the axes that name its condition

    @property
    def ok(self) -> bool:
        return self.record.status == "ok"

    @property
    def values(self) -> dict[str, Any]:
        """The cell's axis values as run: its spec, with the impairment, the connection mode it was asked for
        and a fleet's size as cell.json records them (a cell recorded before the spec was kept has none)."""
        r = self.record
        return {**(r.spec or {}), "scenario": r.scenario, "payload": r.payload, "impairment": r.impairment,
                "connection": r.connection_mode, "devices": r.devices}

    @property
    def condition(self) -> str:
        return condition_of(self.values, self.table)

    @property
    def group(self) -> tuple[int, str, str]:
        """(payload, condition, scenario): the cells that differ only by repeat (the condition: the
        impairment, the connection mode when it is not persistent, a fleet's size)."""
        return (self.record.payload, self.condition, self.record.scenario)


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


def read_messages(path: Path, columns: Sequence[str] | None = MESSAGE_COLUMNS) -> pd.DataFrame:
    """per_message.csv: the ``columns`` the report uses (others are ignored; None: every column), the numeric
    ones checked and read as floats; an error names the file, the line and the column."""
    wanted = None if columns is None else set(columns)
    try:
        df = pd.read_csv(path, usecols=None if wanted is None else (lambda c: c in wanted), dtype={"device": str})
    except FileNotFoundError:
        raise TestbedError(f"{path}: missing") from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise TestbedError(f"{path}: cannot read as CSV: {exc}") from None
    missing = [c for c in REQUIRED_MESSAGE_COLUMNS if c not in df.columns]
    if missing:
        raise TestbedError(f"{path}: missing column(s): {', '.join(missing)}")
    for column in NUMERIC_MESSAGE_COLUMNS:
        if column in df.columns:
            converted = pd.to_numeric(df[column], errors="coerce")
            bad = converted.isna() & df[column].notna()
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # header is line 1
                raise TestbedError(f"{path}:{row}: {column}: not a number: {df[column].iloc[row - 2]!r}")
            df[column] = converted.astype(float)
    return df


def load_bundle(root: Path, message_columns: Sequence[str] | None = MESSAGE_COLUMNS,
                table: AxisTable = AXES) -> Bundle:
    """Read every run folder of ``root``; failed/interrupted cells are kept but not read further
    (``message_columns``: the columns of per_message.csv to keep, None for all; ``table``: the axes that name
    the cells' conditions)."""
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
        cell = Cell(record=read_cell_record(run.cell), folder=folder, table=table)
        if cell.ok:
            cell.metrics = read_metrics(run.metrics)
            cell.messages = read_messages(run.per_message, message_columns)
        bundle.cells.append(cell)
    if not bundle.cells and not bundle.incomplete:
        raise TestbedError(f"{layout.runs}: no run folders; nothing to report")
    return bundle
