"""The headline, first in the report: what each TLS scenario costs over the baseline, per payload and per
condition the bundle varies (impairment, connection mode, fleet size), in words and one compact table.

Every figure is read from what the report already computed (the comparisons rows, the cells' metrics.json,
the lifecycle cost model, the fleet blocks) and links to the section whose table it comes from; a figure
that is not available says n/a with the reason. The study's published numbers stand beside ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.model.axes import NO_IMPAIRMENT
from orchestrator.report import fleet, lifecycle
from orchestrator.report.document import Block, Bullets, CellText, Heading, Inline, Link, Paragraph, Table
from orchestrator.report.loader import PERSISTENT, Cell
from orchestrator.report.order import GroupKey, scenario_order
from orchestrator.report.sections import comparisons_title
from orchestrator.report.study import STUDY_TITLE, StudyReference
from orchestrator.report.values import NA, Row, metric, num

TITLE = "Headline: what TLS costs over the baseline"
COLUMNS = ("payload", "scenario", "bytes per PUBLISH", "median one-way delay (95 % CI)", "effect (Cliff's delta)",
           "TLS handshake: time, bytes", "broker CPU per message", "broker CPU per handshake", "study (published)")
COST_COLUMNS = ("payload", "scenario", "mode", *(f"B per reading, K={k}" for k in lifecycle.K_SHOWN),
                "break-even K")
NO_HANDSHAKE_CPU = ("broker CPU per handshake is measured only in fleet cells (the connect phase's CPU windows); "
                    "these cells open one connection each")
ABOUT = ("Broker CPU per message: a fleet's steady-phase windows; otherwise the broker's CPU over the run divided by "
         "the messages received, the one handshake and the idle time included.")


@dataclass(frozen=True)
class Value:
    """One headline figure: its text and the section it comes from, or n/a and why."""

    text: str | None
    source: str
    reason: str = ""


def _nbsp(text: str) -> str:
    """A number and its unit (and a sign and its number) kept on one line."""
    for unit in (" B", " ms", " %", " us", " .. "):
        text = text.replace(unit, unit.replace(" ", "\u00a0"))
    return text


class _Reasons:
    """n/a reasons of the table, numbered once each and listed under it."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def cell(self, figure: Value) -> CellText:
        if figure.text is not None:
            return Link(_nbsp(figure.text), figure.source)
        if figure.reason not in self.reasons:
            self.reasons.append(figure.reason)
        return f"{NA} [{self.reasons.index(figure.reason) + 1}]"


@dataclass(frozen=True)
class Pair:
    """One scenario against the baseline at one payload and condition, with its comparisons rows and cells."""

    payload: int
    condition: str
    scenario: str
    rows: dict[str, Row]
    base_cells: Sequence[Cell]
    scen_cells: Sequence[Cell]

    @property
    def label(self) -> str:
        return f"{self.payload} B" + ("" if self.condition == "none" else f", {self.condition}")


def _condition(row: Row) -> str:
    return row["impairment"] if row["connection"] == PERSISTENT else f"{row['impairment']} + {row['connection']}"


def pairs(comparisons: Sequence[Row], groups: dict[GroupKey, list[Cell]], baseline: str) -> list[Pair]:
    """The compared (payload, condition, scenario) triples, in the comparisons' order."""
    rows: dict[tuple[int, str, str], dict[str, Row]] = {}
    for row in comparisons:
        rows.setdefault((row["payload"], _condition(row), row["scenario"]), {})[row["metric"]] = row
    return [Pair(p, c, s, by_metric, groups.get((p, c, baseline), []), groups.get((p, c, s), []))
            for (p, c, s), by_metric in rows.items()]


# ---------------------------------------------------------------- the figures of one pair
def wire_bytes(pair: Pair, baseline: str) -> Value:
    row = pair.rows.get("frame_len_bytes")
    src = comparisons_title(baseline)
    if row is None or row["delta_median"] is None:
        return Value(None, src, "no PUBLISH alone in its frame on the capture")
    return Value(f"{num(row['delta_median'], 0, True)} B ({num(row['delta_median_pct'], 1, True)} %)", src)


def _delay_reason(cells: Sequence[Cell]) -> str:
    for cell in cells:
        section = (cell.metrics or {}).get("delay_ms") or {}
        if isinstance(section, dict) and section.get("available") is False:
            return f"one-way delay not available: {section.get('reason') or 'no shared clock'}"
    return "no one-way delay samples"


def delay(pair: Pair, baseline: str) -> tuple[Value, Value]:
    """(delta of the median with the 95 % CI of that delta, Cliff's delta in words)."""
    row = pair.rows.get("delay_ms")
    src = comparisons_title(baseline)
    if row is None or row["delta_median"] is None:
        reason = _delay_reason([*pair.base_cells, *pair.scen_cells])
        return Value(None, src, reason), Value(None, src, reason)
    ci = (f" ({num(row['ci95_median_low'], 3, True)} .. {num(row['ci95_median_high'], 3, True)})"
          if row["ci95_median_low"] is not None else " (no CI: too few values)")
    effect = (Value(f"{row['cliffs_magnitude']} ({row['cliffs_delta']:+.2f})", src)
              if row["cliffs_delta"] is not None else Value(None, src, "too few values for an effect size"))
    return Value(f"{num(row['delta_median'], 3, True)} ms{ci}", src), effect


def handshake(pair: Pair, baseline: str) -> Value:
    """The scenario's TLS handshake time and the handshake bytes it adds (both directions) over the baseline."""
    src = comparisons_title(baseline)
    time_row = pair.rows.get("tls_handshake_ms")
    if time_row is None or time_row["scenario_mean"] is None:
        return Value(None, src, "no TLS handshake on the scenario's capture")
    deltas = [pair.rows[m]["delta_mean"] for m in ("handshake_bytes_c2s", "handshake_bytes_s2c") if m in pair.rows]
    added = (f", {num(sum(deltas), 0, True)} B" if deltas and None not in deltas
             else ", bytes n/a (not on both captures)")
    return Value(f"{num(time_row['scenario_mean'], 2)} ms{added}", src)


def _fleet_cpu(cells: Sequence[Cell], which: str) -> float | None:
    """Mean over the cells of the fleet block's broker CPU per event (ms), None when no cell has it."""
    values = [v for c in cells
              if (v := (((fleet.cell_fleet_block(c) or {}).get("broker") or {}).get(which) or {})
                  .get("cpu_ms_per_event")) is not None]
    return sum(values) / len(values) if values else None


def _run_cpu_per_message(cells: Sequence[Cell]) -> float | None:
    """The broker's CPU over the runs / the messages received (seconds per message), None without both."""
    pairs_ = [(cpu, n) for c in cells if (cpu := metric(c, "resources.broker_cpu_s")) is not None
              and (n := metric(c, "loss.received_unique"))]
    return sum(p[0] for p in pairs_) / sum(p[1] for p in pairs_) if pairs_ else None


def broker_cpu_row(pair: Pair, baseline: str) -> tuple[Value, Value]:
    """(per message, per handshake): a fleet's measured windows where the cells are a fleet's, else the run's
    broker CPU divided by its messages (the one handshake and the idle time included)."""
    fleet_src = fleet.TITLE
    if any(fleet.cell_fleet_block(c) for c in pair.scen_cells):
        per_msg, per_hs = _fleet_cpu(pair.scen_cells, "per_message"), _fleet_cpu(pair.scen_cells, "per_handshake")
        base_msg = _fleet_cpu(pair.base_cells, "per_message")
        msg = (Value(f"{num((per_msg - base_msg) * 1000, 1, True)} us", fleet_src) if per_msg is not None
               and base_msg is not None else Value(f"{num(per_msg * 1000, 1)} us ({pair.scenario})", fleet_src)
               if per_msg is not None else Value(None, fleet_src, "no broker CPU windows in the steady phase"))
        hs = (Value(f"{num(per_hs, 2)} ms ({pair.scenario})", fleet_src) if per_hs is not None
              else Value(None, fleet_src, "no broker CPU windows in the connect phase"))
        return msg, hs
    src = comparisons_title(baseline)
    base, scen = _run_cpu_per_message(pair.base_cells), _run_cpu_per_message(pair.scen_cells)
    if base is None or scen is None:
        return (Value(None, src, "the cells recorded no broker CPU (resources.broker_cpu_s)"),
                Value(None, src, NO_HANDSHAKE_CPU))
    return Value(f"{num((scen - base) * 1e6, 1, True)} us", src), Value(None, src, NO_HANDSHAKE_CPU)


def published(pair: Pair, study: StudyReference) -> str:
    """The study's own numbers for this payload (it measured 65 and 100 B, no impairment, one connection)."""
    pub = study.payloads.get(pair.payload)
    if pub is None or pair.condition != "none":
        return "not measured in the study"
    return f"+{pub.tls_overhead_bytes} B; +{pub.delay_increase_ms} ms (+{pub.delay_increase_pct} %) 'delay'"


# ---------------------------------------------------------------- the section
def limited_cells(pair: Pair) -> list[str]:
    """The pair's cells whose loader fell behind (report/fleet.py limits)."""
    return [c.record.cell_id for c in (*pair.base_cells, *pair.scen_cells) if fleet.loader_limited(c)]


def _loader_marked(figure: Value) -> Value:
    """A handshake figure measured while its loader was late: the loader's as much as the broker's."""
    return figure if figure.text is None else Value(f"{figure.text} (loader-limited)", fleet.TITLE)


def _figures(pair: Pair, baseline: str) -> tuple[Value, ...]:
    size, median, effect = wire_bytes(pair, baseline), *delay(pair, baseline)
    hs, (cpu_msg, cpu_hs) = handshake(pair, baseline), broker_cpu_row(pair, baseline)
    if limited_cells(pair):
        hs, cpu_msg, cpu_hs = _loader_marked(hs), _loader_marked(cpu_msg), _loader_marked(cpu_hs)
    return size, median, effect, hs, cpu_msg, cpu_hs


def _sentence(pair: Pair, baseline: str, figs: Sequence[CellText], study: StudyReference) -> Inline:
    size, median, effect, hs, cpu_msg, cpu_hs = figs
    pub = published(pair, study)
    tail: tuple[CellText, ...] = ()
    if not pub.startswith("not"):
        tail = (f" The study published {pub} (its 'delay' is inter-arrival time: see ",
                Link(STUDY_TITLE, STUDY_TITLE), ").")
    late = limited_cells(pair)
    if late:
        tail = (*tail, f" The loader fell behind in {', '.join(late)} (loader-limited): the handshake times and the "
                "broker's CPU here are the loader's as much as the broker's; see ", Link(fleet.TITLE, fleet.TITLE),
                ".")
    return (f"{pair.label}, {pair.scenario} vs {baseline}: ", size, " per PUBLISH on the wire; median one-way "
            "delay ", median, " (95 % CI of the change in parentheses), effect size ", effect, "; TLS handshake ", hs,
            "; broker CPU ", cpu_msg, " per message, ", cpu_hs, " per handshake.", *tail)


def _lifecycle_blocks(groups: dict[GroupKey, list[Cell]]) -> list[Block]:
    costs = lifecycle.costs(groups)
    if not costs:
        if any(lifecycle.lifecycle_cell_rows(cells) for cells in groups.values()):
            return [Paragraph(("Cost per reading: n/a (the model needs a persistent and a reconnect cell of the "
                               "same scenario and payload; see ", Link(lifecycle.TITLE, lifecycle.TITLE), ")."))]
        return []
    plains = {(c.payload, c.impairment): c for c in costs if c.mode == "plain"}
    rows: list[tuple[CellText, ...]] = [
        (f"{c.payload} B" + ("" if c.impairment == NO_IMPAIRMENT else f", {c.impairment}"), c.scenario, c.mode,
         *(Link(f"{c.at(k):,.0f}", lifecycle.TITLE) for k in lifecycle.K_SHOWN),
         Link(lifecycle.break_even(c, plains.get((c.payload, c.impairment))), lifecycle.TITLE)) for c in costs]
    return [Table(COST_COLUMNS, tuple(rows), "A sensor that reconnects: wire bytes per reading at K readings per "
                  "connection; break-even K against plain MQTT reconnecting for every reading")]


def _fleet_blocks(cells: Sequence[Cell]) -> list[Block]:
    rows = []
    for cell in cells:
        block = fleet.cell_fleet_block(cell)
        if block is None:
            continue
        msgs = block.get("messages") or {}
        delays = block.get("one_way_delay_ms") or {}
        broker = block.get("broker") or {}
        per_msg = fleet.fmt_scaled((broker.get("per_message") or {}).get("cpu_ms_per_event"), 1, 1000.0)
        per_hs = fleet.fmt_scaled((broker.get("per_handshake") or {}).get("cpu_ms_per_event"), 2)
        cpu = f"broker CPU {per_msg} us per message, {per_hs} ms per handshake"
        p50, p99 = fleet.fmt_scaled(delays.get("median"), 2), fleet.fmt_scaled(delays.get("p99"), 2)
        late = (f"{fleet.LOADER_LIMITED}; " if fleet.loader_limited(cell) else "")
        rows.append((cell.record.cell_id, Link(
            f"{late}{block.get('devices')} devices, {msgs.get('delivered')} of {msgs.get('sent')} delivered, "
            "one-way delay "
            f"p50 {p50} / p99 {p99} ms; {cpu}; "
            f"{fleet.verdict_text(block)}", fleet.TITLE)))
    return [Table(("fleet cell", "result"), tuple(rows), "Fleet cells, one line each")] if rows else []


def headline_section(comparisons: Sequence[Row], groups: dict[GroupKey, list[Cell]], ok: Sequence[Cell],
                     baseline: str, study: StudyReference) -> list[Block]:
    """The headline blocks: the words, the compact table with its n/a reasons, the lifecycle and fleet lines."""
    blocks: list[Block] = [Heading(2, TITLE)]
    found = pairs(comparisons, groups, baseline)
    if not found:
        scenarios = ", ".join(scenario_order({c.record.scenario for c in ok}, baseline)) or "none"
        blocks.append(Paragraph((f"No scenario could be compared with the baseline '{baseline}' (finished "
                                 f"scenarios: {scenarios}): see ", Link(comparisons_title(baseline),
                                                                         comparisons_title(baseline)), ".")))
    else:
        reasons = _Reasons()
        lines, rows = [], []
        for pair in found:
            figs = [reasons.cell(f) for f in _figures(pair, baseline)]
            lines.append(_sentence(pair, baseline, figs, study))
            rows.append((pair.label, pair.scenario, *figs, Link(published(pair, study), STUDY_TITLE)))
        blocks += [Bullets(tuple(lines)), Table(COLUMNS, tuple(rows), f"Scenario minus {baseline}; every figure links "
                                                                 "to its table")]
        blocks.append(Paragraph(ABOUT))
        if reasons.reasons:
            blocks.append(Paragraph("n/a: " + "; ".join(f"[{i}] {r}" for i, r in enumerate(reasons.reasons, 1))
                                    + "."))
    return [*blocks, *_lifecycle_blocks(groups), *_fleet_blocks(ok)]

