"""`testbed energy import RUN TRACE`: a power trace aligned to a run's events, energy per phase and per reading,
the model's error beside it (issue 42, part 3; orchestrator/analysis/tracealign.py does the alignment).

The run's events: ``connections.csv`` (a cell that reconnects) or, for a persistent cell, its one connection from
``packets.csv`` (first and last frame of the publisher) and the handshake block; each PUBLISH from per_message.csv
(its arrival at the broker, capture clock). Nothing is written into the run folder until the import succeeded:
``energy.json`` is then replaced in one rename.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis import energymodel as em
from orchestrator.analysis.powertrace import read_trace
from orchestrator.analysis.tracealign import RunConnection, by_current, by_marker, measure_phases
from orchestrator.errors import TestbedError
from orchestrator.model.layout import Layout
from orchestrator.results.archive import file_sha256
from orchestrator.results.atomic import write_json_atomic
from orchestrator.runanalysis.energy import PUBLISHER_LEGS, RunFacts, modelled, read_run_json, run_facts


def _ms(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return 0.0
    return out / 1e3 if np.isfinite(out) else 0.0


def _publishes(layout: Layout) -> np.ndarray:
    if not layout.per_message.is_file():
        return np.empty(0)
    msgs = pd.read_csv(layout.per_message, usecols=lambda c: c == "broker_in_us")
    if "broker_in_us" not in msgs:
        return np.empty(0)
    return np.sort(pd.to_numeric(msgs["broker_in_us"], errors="coerce").dropna().to_numpy(dtype=float) / 1e6)


def _connection(row: pd.Series, pubs: np.ndarray, nxt: float) -> RunConnection:
    start = float(row["syn_time"])
    tls_start = start + _ms(row.get("tcp_connect_ms"))
    tls_end = tls_start + _ms(row.get("tls_handshake_ms"))
    connack = float(row["connack_time"]) if pd.notna(row.get("connack_time")) else tls_end
    end = float(row["end_time"]) if pd.notna(row.get("end_time")) else nxt
    own = tuple(float(p) for p in pubs if start <= p <= end)
    return RunConnection(start, tls_start, max(tls_end, tls_start), max(connack, tls_end), max(end, connack), own,
                         str(row.get("handshake", "")))


def run_connections(folder: Path) -> list[RunConnection]:
    """The publisher's connections of a run with their events, in time order (run clock, epoch seconds)."""
    layout = Layout(folder)
    pubs = _publishes(layout)
    if layout.connections.is_file():
        rows = pd.read_csv(layout.connections).dropna(subset=["syn_time"]).sort_values("syn_time")
        starts = rows["syn_time"].astype(float).tolist()
        conns = [_connection(r, pubs, starts[i + 1] if i + 1 < len(starts) else float("inf"))
                 for i, (_, r) in enumerate(rows.iterrows())]
        return [c for c in conns if np.isfinite(c.end)]
    if not layout.packets.is_file():
        raise TestbedError(f"{folder}: neither connections.csv nor packets.csv", hint="analyse the run first "
                                                                                      "(testbed report)")
    return [_persistent_connection(folder, layout, pubs)]


def _persistent_connection(folder: Path, layout: Layout, pubs: np.ndarray) -> RunConnection:
    pk = pd.read_csv(layout.packets, usecols=["time", "leg"])
    times = pk.loc[pk["leg"].isin(PUBLISHER_LEGS), "time"].astype(float)
    if times.empty:
        raise TestbedError(f"{folder}: packets.csv has no frame of the publisher", hint="was the run analysed?")
    metrics = read_run_json(layout.metrics)
    hs = metrics.get("handshake") or {}
    kind = "full" if (metrics.get("inputs") or {}).get("tls") else "none"
    start = float(times.min())
    tls_start = start + _ms(hs.get("tcp_connect_ms"))
    tls_end = tls_start + _ms(hs.get("tls_handshake_ms"))
    connack = tls_end + _ms(hs.get("mqtt_connect_ms"))
    return RunConnection(start, tls_start, tls_end, connack, float(times.max()), tuple(pubs.tolist()), kind)


def _in_mj(measured: dict[str, Any], volts: float) -> dict[str, Any]:
    phases = {k: {"mc": round(v["mc"], 6), "mj": round(v["mc"] * volts, 6), "seconds": round(v["seconds"], 6)}
              for k, v in measured["phases"].items()}
    per = measured["per_reading_mc"]
    return {"label": "measured", "phases": phases, "total_mj": round(measured["total_mc"] * volts, 6),
            "per_reading_mj": round(per * volts, 6) if per is not None else None,
            "per_connection_mc": [{k: round(v, 6) for k, v in c.items()} for c in measured["per_connection"]]}


def _model_error(facts: RunFacts, model: em.EnergyModel, measured: dict[str, Any],
                 conns: list[RunConnection]) -> dict[str, Any]:
    """The model at the cell's own interval, K, sleep mode and power save against the trace:
    per reading and the set-up phases per connection, (modelled - measured) / measured in %; the kinds weighted by
    their connections in the run."""
    weights = [sum(c.kind == f.kind for c in conns) for f in facts.figures]
    if not facts.figures or not measured["per_reading_mj"] or not sum(weights):
        return {}
    kinds = [em.model_reading(model, f, sleep=em.SLEEP_OF_AXIS[facts.sleep_mode], interval_s=facts.interval_s,
                              capacity_mah=float(model.inputs["capacity_mah"].value), power_save=facts.power_save)
             for f in facts.figures]
    volts = model.v("supply_v")
    per = float(np.average([m.per_reading_mj for m in kinds], weights=weights))
    out: dict[str, Any] = {"label": "modelled vs measured", "per_reading_mj_modelled": round(per, 6),
                           "per_reading_error_pct": round((per / measured["per_reading_mj"] - 1) * 100, 3)}
    for phase in ("tcp", "tls", "mqtt"):
        got = measured["phases"][phase]["mj"] / len(conns)
        want = float(np.average([m.phases_mc[phase] for m in kinds], weights=weights)) * volts
        out[f"{phase}_mj_per_connection_modelled"] = round(want, 6)
        out[f"{phase}_error_pct"] = round((want / got - 1) * 100, 3) if got > 0 else None
    return out


def import_trace(folder: Path, trace_path: Path, fmt: str, *, marker: bool = True, marker_channel: str | None = None,
                 start: float | None = None, start_error_s: float = 1.0, voltage: float | None = None,
                 model_path: Path | None = None) -> dict[str, Any]:
    """Read, align and integrate ``trace_path`` against the run in ``folder``; write energy.json's ``measured``."""
    layout = Layout(folder)
    model = em.load_energy_model(model_path)
    facts = run_facts(folder)
    conns = run_connections(folder)
    if not conns:
        raise TestbedError(f"{folder}: the run has no connection of the publisher to align a trace to")
    trace = read_trace(trace_path, fmt, marker_channel)
    name = str(trace_path)
    if marker and trace.marker is not None and trace.marker.any():
        al = by_marker(trace, conns, name)
    else:
        al = by_current(trace, conns, name, start=start, start_error_s=start_error_s)
    volts = voltage if voltage is not None else model.v("supply_v")
    measured = _in_mj(measure_phases(trace, conns, al, facts.readings), volts)
    result = {"trace": {"file": trace_path.name, "sha256": file_sha256(trace_path), "format": fmt,
                        "header": trace.header, "samples": int(trace.time_s.size),
                        "sample_period_ms": round(trace.period_s * 1e3, 6), "marker_channel": trace.marker_channel,
                        "supply_v": volts},
              "alignment": al.as_dict(), "connections": len(conns), "measured": measured,
              "model_error": _model_error(facts, model, measured, conns),
              "modelled": modelled(facts, model)}
    write_json_atomic(layout.energy, result)
    return result
