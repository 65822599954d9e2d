"""The report's section "What TLS costs the battery" (issue 42, docs/energy.md): modelled and measured apart.

Modelled (the built-in ESP32 model, orchestrator/analysis/esp32_energy.yaml, every parameter's source listed): per
cell and connection kind at the cell's K, energy per reading and battery life for each sleep mode between
connections; the break-even K in energy (the fewest readings per connection at which a TLS mode costs no more
energy per reading than plain MQTT reconnecting for every reading) beside the one in bytes (the connection
lifecycle's cost model, report/lifecycle.py). Measured: the cells whose run folder has an imported power trace
(energy.json), each with its alignment and the model's error beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.analysis import energymodel as em
from orchestrator.errors import TestbedError
from orchestrator.model.layout import Layout
from orchestrator.report import lifecycle
from orchestrator.report.document import Block, Heading, Paragraph, Table
from orchestrator.report.loader import Cell
from orchestrator.report.values import NA
from orchestrator.results.atomic import read_json
from orchestrator.runanalysis.energy import RunFacts, modelled, run_facts

TITLE = "What TLS costs the battery"
MODELLED_COLUMNS = ("cell", "mode", "K", "sleep between connections", "mJ per reading (modelled)",
                    "battery life, days (modelled)")
BREAK_EVEN_COLUMNS = ("payload", "impairment", "scenario", "mode", "break-even K, bytes (measured)",
                      *(f"break-even K, energy, {s} (modelled)" for s in em.SLEEP_MODES))
MEASURED_COLUMNS = ("cell", "trace", "aligned by", "bound ms", "mJ per reading (measured)",
                    "mJ per reading (modelled)", "model error %", "tls mJ per connection (measured)")
LIFECYCLE_MODE = {"full": "full handshake", "resumed-id": "resumed (id)", "resumed-ticket": "resumed (ticket)",
                  "resumed-psk": "resumed (ticket, TLS 1.3 PSK)"}


def _facts(cells: Sequence[Cell]) -> list[tuple[Cell, RunFacts]]:
    out = []
    for c in cells:
        if (c.record.devices or 1) > 1:  # a fleet's cell: many devices' connections, no one device's battery
            continue
        try:
            facts = run_facts(c.folder)
        except TestbedError:
            continue
        if facts.figures:
            out.append((c, facts))
    return out


def modelled_rows(facts: Sequence[tuple[Cell, RunFacts]], model: em.EnergyModel) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for cell, f in facts:
        for r in modelled(f, model)["rows"]:
            rows.append((cell.record.cell_id, r["mode"], f"{r['per_connection']:g}",
                         r["sleep"] + (" (the cell's)" if r["ran"] else ""),
                         f"{r['per_reading_mj']:.2f}", f"{r['battery_life_days']:.1f}"))
    return rows


def _bytes_break_even(groups: dict[tuple[int, str, str], list[Cell]]) -> dict[tuple[int, str, str, str], str]:
    costs = lifecycle.costs(groups)
    plains = {(c.payload, c.impairment): c for c in costs if c.mode == "plain"}
    return {(c.payload, c.impairment, c.scenario, c.mode): lifecycle.break_even(c, plains.get((c.payload,
                                                                                                c.impairment)))
            for c in costs}


def break_even_rows(facts: Sequence[tuple[Cell, RunFacts]], model: em.EnergyModel,
                    groups: dict[tuple[int, str, str], list[Cell]]) -> list[tuple[str, ...]]:
    """One row per TLS kind of each (payload, impairment, scenario) whose plain counterpart the bundle has."""
    plain: dict[tuple[int, str], em.ConnectionFigures] = {}
    tls: dict[tuple[int, str, str, str], em.ConnectionFigures] = {}
    for cell, f in facts:
        r = cell.record
        for fig in f.figures:
            if fig.kind == "none":
                plain.setdefault((r.payload, r.impairment), fig)
            else:
                tls.setdefault((r.payload, r.impairment, r.scenario, fig.kind), fig)
    in_bytes = _bytes_break_even(groups)
    cap, every = float(model.inputs["capacity_mah"].value), float(model.inputs["interval_s"].value)
    rows: list[tuple[str, ...]] = []
    for (payload, impairment, scenario, kind), fig in sorted(tls.items()):
        base = plain.get((payload, impairment))
        if base is None:
            continue
        mode = LIFECYCLE_MODE.get(kind, kind)
        ks = [em.break_even_k(model, fig, base, sleep=s, interval_s=every, capacity_mah=cap) for s in em.SLEEP_MODES]
        rows.append((str(payload), impairment, scenario, mode, in_bytes.get((payload, impairment, scenario, mode), NA),
                     *(str(k) if k is not None else "never (up to K = 1000)" for k in ks)))
    return rows


def _measured_row(cell: Cell, data: dict[str, Any]) -> tuple[str, ...]:
    m, al, err = data.get("measured") or {}, data.get("alignment") or {}, data.get("model_error") or {}
    tls_mj = ((m.get("phases") or {}).get("tls") or {}).get("mj")
    conns = int(data.get("connections") or 0)

    def num(v: Any, digits: int = 2) -> str:
        return NA if v is None else f"{v:.{digits}f}"
    return (cell.record.cell_id, f"{(data.get('trace') or {}).get('format', NA)}", str(al.get("method", NA)),
            num(al.get("error_bound_ms"), 3), num(m.get("per_reading_mj")), num(err.get("per_reading_mj_modelled")),
            num(err.get("per_reading_error_pct"), 1),
            num(float(tls_mj) / conns if tls_mj is not None and conns else None))


def measured_rows(cells: Sequence[Cell]) -> list[tuple[str, ...]]:
    return [_measured_row(c, data) for c in cells if (data := read_json(Layout(c.folder).energy))]


def _sources(model: em.EnergyModel) -> Table:
    rows = tuple((k, str(p.value), p.source) for k, p in {**model.parameters, **model.inputs}.items())
    return Table(("parameter", "value", "source"), rows, f"The energy model's parameters ({model.origin})")


ABOUT = (
    "Energy per reading and battery life of an ESP32 publishing as each cell did, from what the cell measured (wire "
    "bytes each way, set-up times, readings per connection K) and a device energy model whose every parameter names "
    "its source (below). Every figure in the first two tables is MODELLED; measured figures come only from a power "
    "trace imported into a run folder (`testbed energy import`), in their own table. Each cell is modelled in "
    "every sleep mode between connections; the one it ran with (--sleep-mode) is marked \"the cell's\" (a virtual "
    "device emulates a deep sleep's forgetting and resumed session, not a radio's power). Capacity {cap:g} mAh, one "
    "reading every {every:g} s, the radio's power save as each cell ran (docs/energy.md)."
)
BREAK_EVEN = (
    "Break-even K: the fewest readings per connection at which a TLS mode costs no more than plain MQTT reconnecting "
    "for every reading: in bytes on the wire (measured, the connection lifecycle's model) and in energy (modelled, "
    "per sleep mode). A connection of K readings also stays up between them, so in energy a longer connection can "
    "cost more than a new handshake: then it is never."
)


def energy_section(cells: Sequence[Cell], groups: dict[tuple[int, str, str], list[Cell]]) -> list[Block]:
    ok = [c for c in cells if c.ok]
    facts = _facts(ok)
    if not facts:
        return []
    model = em.load_energy_model()
    cap, every = float(model.inputs["capacity_mah"].value), float(model.inputs["interval_s"].value)
    blocks: list[Block] = [Heading(2, TITLE), Paragraph(ABOUT.format(cap=cap, every=every)),
                           Table(MODELLED_COLUMNS, tuple(modelled_rows(facts, model)),
                                 "Energy per reading and battery life per connection kind and sleep mode (modelled)")]
    even = break_even_rows(facts, model, groups)
    if even:
        blocks += [Paragraph(BREAK_EVEN), Table(BREAK_EVEN_COLUMNS, tuple(even), "Break-even K, bytes and energy")]
    blocks.append(_sources(model))
    measured = measured_rows(ok)
    blocks.append(Table(MEASURED_COLUMNS, tuple(measured), "Measured from an imported power trace")
                  if measured else Paragraph("Measured: no cell of this bundle has an imported power trace "
                                             "(testbed energy import RUN TRACE --format ppk2|otii|csv)."))
    return blocks
