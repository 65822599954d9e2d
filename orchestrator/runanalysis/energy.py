"""What TLS costs the battery, for one run folder (issue 42): the model applied to what the cell measured, and a
power trace imported against the run's events (docs/energy.md).

What the cell measured, per kind of connection: ``metrics.json`` ``connections.by_kind`` (a cell that reconnects:
wire bytes each way, TCP / TLS / MQTT set-up times and the handshake split's device share, medians) or, for a
persistent cell, its ``handshake`` block and ``packets.csv``; each reading's PUBLISH frame from per_message.csv.
The run's events for a trace: ``connections.csv`` (each connection's SYN, set-up times, CONNACK and end) and each
PUBLISH's arrival at the broker (per_message.csv ``broker_in_us``), or for a persistent cell its one connection
from ``packets.csv`` and the handshake block.

``import_trace`` writes ``energy.json`` only once the trace is read, aligned and integrated (a temporary file
renamed into place): a refused trace leaves the run folder as it was.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis import energymodel as em
from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import read_json_strict

PUBLISHER_LEGS = ("publisher->broker", "broker->publisher")


@dataclass(frozen=True)
class RunFacts:
    """What the model and the import need of a run folder."""

    figures: list[em.ConnectionFigures]
    readings: int
    interval_s: float
    board_measured: bool
    sleep_mode: str = str(AXES["sleep_mode"].default)  # the axis's words the cell ran with (cell.json spec)
    power_save: str = str(AXES["power_save"].default)


def read_run_json(path: Path) -> dict[str, Any]:
    """A run folder's JSON object (metrics.json, cell.json); refused naming the file when it is missing or broken."""
    if not path.is_file():
        raise TestbedError(f"{path.parent}: no {path.name}", hint="is this a run folder (runs/<cell>/) that "
                                                                  "was analysed?")
    data = read_json_strict(path)
    return data if isinstance(data, dict) else {}


def _num(value: Any, default: float = 0.0) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return out if math.isfinite(out) else default


def _publish_bytes(layout: Layout) -> float:
    if not layout.per_message.is_file():
        return 0.0
    frames = pd.read_csv(layout.per_message, usecols=lambda c: c in ("frame_len", "msgs_in_frame"))
    if "frame_len" not in frames or frames.empty:
        return 0.0
    per = frames["frame_len"] / frames.get("msgs_in_frame", pd.Series(1, index=frames.index)).clip(lower=1)
    return float(per.median())


def _board_measured(layout: Layout) -> bool:
    cell = read_run_json(layout.cell) if layout.cell.is_file() else {}
    board = cell.get("board")
    return bool(board) and "emulated" not in json.dumps(board)


def _reconnecting(block: dict[str, Any], publish: float, board: bool) -> list[em.ConnectionFigures]:
    out = []
    for kind, v in sorted((block.get("by_kind") or {}).items()):
        if kind == "unknown":
            continue
        out.append(em.ConnectionFigures(
            kind, float(block.get("per_connection") or 1), _num(v.get("wire_client_to_server_median")),
            _num(v.get("wire_server_to_client_median")), publish, _num(v.get("tcp_connect_ms_median")),
            _num(v.get("tls_handshake_ms_median")), _num(v.get("mqtt_connect_ms_median")),
            _num(v.get("split_device_ms_median")), board))
    return out


def _persistent(layout: Layout, metrics: dict[str, Any], readings: int, publish: float, board: bool
                ) -> list[em.ConnectionFigures]:
    hs = metrics.get("handshake") or {}
    tls = bool((metrics.get("inputs") or {}).get("tls"))
    up = down = 0.0
    if layout.packets.is_file():
        pk = pd.read_csv(layout.packets, usecols=["frame_len", "leg"])
        up = float(pk.loc[pk["leg"] == PUBLISHER_LEGS[0], "frame_len"].sum())
        down = float(pk.loc[pk["leg"] == PUBLISHER_LEGS[1], "frame_len"].sum())
    return [em.ConnectionFigures("full" if tls else "none", float(max(readings, 1)), up, down, publish,
                                 _num(hs.get("tcp_connect_ms")), _num(hs.get("tls_handshake_ms")),
                                 _num(hs.get("mqtt_connect_ms")), 0.0, board)]


def run_facts(folder: Path) -> RunFacts:
    """The figures per kind of connection, the readings and the reading interval of a run folder."""
    layout = Layout(folder)
    metrics = read_run_json(layout.metrics)
    cell = read_run_json(layout.cell) if layout.cell.is_file() else {}
    loss = metrics.get("loss") or {}
    readings = int(_num(loss.get("publisher_logged")) or _num(loss.get("samples_expected")))
    interval_s = _num((cell.get("spec") or {}).get("interval_ms"), 250.0) / 1e3
    publish, board = _publish_bytes(layout), _board_measured(layout)
    block = metrics.get("connections")
    if isinstance(block, dict) and block.get("count"):
        figures = _reconnecting(block, publish, board)
    else:
        figures = _persistent(layout, metrics, readings, publish, board)
    spec = cell.get("spec") or {}
    return RunFacts(figures, readings, interval_s, board, str(AXES.value(spec, "sleep_mode")),
                    str(AXES.value(spec, "power_save")))


def ran_note(facts: RunFacts) -> str:
    """What the cell's own sleep mode and power save were, and what of them was real."""
    ran = f"sleep mode {facts.sleep_mode}, power save {facts.power_save}"
    if facts.board_measured:
        return f"the board ran with {ran}; every figure here is modelled from what it measured"
    return (f"the virtual device ran with {ran}: a host emulates a deep sleep's forgetting (the TLS session resumed "
            "from what RTC memory keeps), not a light sleep's or the power save's radio; every figure here is "
            "modelled")


def modelled(facts: RunFacts, model: em.EnergyModel, *, capacity_mah: float | None = None,
             interval_s: float | None = None, power_save: str | None = None) -> dict[str, Any]:
    """Every kind of the cell at its K, for every sleep mode: energy per reading and battery life, modelled. The
    radio's power save is the cell's unless given; the rows of the cell's own sleep mode are marked ``ran``."""
    cap = capacity_mah if capacity_mah is not None else float(model.inputs["capacity_mah"].value)
    every = interval_s if interval_s is not None else float(model.inputs["interval_s"].value)
    save = power_save or facts.power_save
    own = em.SLEEP_OF_AXIS[facts.sleep_mode]
    rows = [em.model_reading(model, f, sleep=s, interval_s=every, capacity_mah=cap, power_save=save).as_dict()
            | {"mode": f.label, "ran": s == own} for f in facts.figures for s in em.SLEEP_MODES]
    return {"label": em.LABEL, "model": model.name, "model_file": model.origin, "capacity_mah": cap,
            "interval_s": every, "power_save": save, "cell_sleep_mode": facts.sleep_mode,
            "cell_power_save": facts.power_save, "note": ran_note(facts), "rows": rows, "sources": model.sources()}
