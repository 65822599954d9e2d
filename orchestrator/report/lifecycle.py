"""What TLS costs a sensor that reconnects: the connections of each cell as the wire shows them, and
the cost per reading as a function of readings per connection (K), with the break-even points.

Per cell (metrics.json ``connections``, cells that are not persistent): connections against those
expected, TLS handshakes full / resumed on the wire after the first, the verdict on resumption, and
what the publisher claimed. The cost model, per (payload, impairment, scenario): a connection costs a
fixed F bytes on the wire (TCP set-up, TLS handshake, CONNECT/CONNACK, the ending) plus m bytes per
reading, so a reading costs F / K + m. m and the full handshake's F come from two MEASURED cells of
the same scenario: the persistent one (one connection carrying N_p readings: W_p = F + N_p m, its
publisher's frames in packets.csv) and the reconnect one (C_r connections carrying N_r readings:
W_r / C_r = F + (N_r / C_r) m). A resumed F is the median wire bytes of a resume cell's resumed
connections less their readings' m. A fleet's cells are solved the same way among cells of the same fleet
size (its persistent cell holds one connection per device: W_p / D = F + (N_p / D) m), and its costs are
labelled with the size beside the impairment. The break-even K: the readings per connection at which a TLS mode
costs no more per reading than plain MQTT reconnecting for every reading (plain F + m at K = 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from orchestrator.model.layout import Layout
from orchestrator.report import plots
from orchestrator.report.document import Block, Figure, Heading, Paragraph, Table
from orchestrator.report.loader import PERSISTENT, Cell, condition, split_condition
from orchestrator.report.values import NA, metric

TITLE = "Connection lifecycle"
STACK_TOKEN = "mbedtls-3.6"  # a condition's part naming the device's 3.6 stack (results/bundle.py protocol)
K_SHOWN = (1, 10, 200)
COLUMNS = ("cell", "mode (used)", "K", "close", "connections", "full", "resumed after the first", "verdict",
           "TLS handshake ms (median)", "handshake round trips (median)", "wire B / connection (median)",
           "wire B / reading", "client claims")
COST_COLUMNS = ("payload", "impairment", "scenario", "mode", "F: B per connection", "m: B per reading",
                *(f"B per reading at K={k}" for k in K_SHOWN), "break-even K vs plain at K=1")


def _lifecycle(cell: Cell) -> dict[str, Any] | None:
    block = (cell.metrics or {}).get("connections")
    return block if isinstance(block, dict) else None


def _n(value: Any, digits: int = 1) -> str:
    return NA if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def round_trips_median(cell: Cell) -> float | None:
    """The median of a cell's ``handshake_round_trips`` (connections.csv, written for a cell that reconnects;
    analysis/connections.py defines it); None without the file, the column or a TLS connection."""
    path = Layout(cell.folder).connections
    if not path.is_file():
        return None
    try:
        trips = pd.read_csv(path, usecols=["handshake_round_trips"])["handshake_round_trips"].dropna()
    except (ValueError, pd.errors.EmptyDataError):  # written before the column existed, or no connection
        return None
    return float(trips.median()) if len(trips) else None


def _wire_by_kind(block: dict[str, Any]) -> str:
    kinds = block.get("by_kind") or {}
    return " / ".join(f"{k}: {v['wire_bytes_median']:.0f}" for k, v in kinds.items()) or NA


def lifecycle_cell_rows(cells: Sequence[Cell]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for c in cells:
        b = _lifecycle(c)
        if b is None:
            continue
        claims = b["client_claims"]
        said = (f"{len(claims['mismatches'])} of {claims['compared']} disagree with the wire"
                if claims["mismatches"] else f"{claims['compared']} agree" if claims["compared"] else NA)
        rows.append((c.record.cell_id, str(b["mode"]), str(b["per_connection"]), str(b["close"]),
                     f"{b['count']} of {b['expected']}", str(b["handshakes"].get("full", 0)),
                     f"{b['resumed_after_first']} of {b['reconnections']}", b.get("verdict") or "-",
                     _n(b.get("tls_handshake_ms_median"), 3), _n(round_trips_median(c)), _wire_by_kind(b),
                     _n(b.get("wire_bytes_per_reading")), said))
    return rows


def _publisher_wire(cell: Cell) -> float | None:
    """Every frame of the publisher's connection(s), both directions, from the cell's packets.csv."""
    path = cell.folder / "packets.csv"
    if not path.is_file():
        return None
    pk = pd.read_csv(path, usecols=["frame_len", "leg"])
    return float(pk.loc[pk["leg"].isin(["publisher->broker", "broker->publisher"]), "frame_len"].sum())


def wire_per_connection(cell: Cell) -> tuple[float, int, int] | None:
    """(publisher's wire bytes, connections, readings) of a cell: the lifecycle block, or for a persistent
    cell its one connection per device from the summary's per-run figures."""
    b = _lifecycle(cell)
    readings = metric(cell, "loss.publisher_logged") or metric(cell, "loss.samples_expected")
    if b is not None and b["count"]:
        return float(b["wire_bytes"]), int(b["count"]), int(readings or 0)
    wire = _publisher_wire(cell)
    return (wire, max(int(cell.record.devices or 1), 1), int(readings)) if wire and readings else None


@dataclass(frozen=True)
class Cost:
    payload: int
    impairment: str
    scenario: str
    mode: str
    fixed: float  # F, bytes per connection
    per_reading: float  # m

    def at(self, k: int) -> float:
        return self.fixed / k + self.per_reading


def _model(persistent: tuple[float, int, int], reconnect: tuple[float, int, int]) -> tuple[float, float] | None:
    """(F, m) from W_p / C_p = F + (N_p / C_p) m (one connection per device) and W_r / C_r = F + (N_r / C_r) m."""
    wp, cp, n_p = persistent
    wr, cr, nr = reconnect
    k_p, k_r = n_p / cp, nr / cr
    if k_p <= k_r:
        return None
    m = (wp / cp - wr / cr) / (k_p - k_r)
    return wp / cp - k_p * m, m


def _resumed_fixed(cell: Cell, m: float) -> float | None:
    """F of a resumed connection: the median wire bytes of the resumed connections, less their readings."""
    b = _lifecycle(cell)
    kinds = (b or {}).get("by_kind") or {}
    resumed = [v for k, v in kinds.items() if k.startswith("resumed")]
    if not b or not resumed:
        return None
    return float(resumed[0]["wire_bytes_median"]) - float(b["per_connection"]) * m


def costs(groups: dict[tuple[int, str, str], list[Cell]]) -> list[Cost]:
    """The cost model of every (payload, impairment, fleet size, device stack, scenario) that has a persistent and a
    reconnect cell (a device stack's cells are solved among their own: TLS 1.3 on mbedTLS 3.6 has its rows)."""
    out: list[Cost] = []
    for (payload, cond, scenario), cells in sorted(groups.items()):
        impairment, rest = split_condition(cond)
        rest, stack = _without_stack(rest)
        mode, devices = _mode_and_devices(rest)
        if mode != "reconnect":
            continue
        persistent = groups.get((payload, condition(impairment, devices=devices, protocol=stack), scenario))
        p_w = wire_per_connection(persistent[0]) if persistent else None
        r_w = wire_per_connection(cells[0])
        model = _model(p_w, r_w) if p_w and r_w else None
        if model is None:
            continue
        fixed, m = model
        where = ", ".join([impairment, *([f"{devices} devices"] if devices > 1 else []), *([stack] if stack else [])])
        out.append(Cost(payload, where, scenario, "full handshake" if _is_tls(cells[0]) else "plain", fixed, m))
        for resume in ("resume-id", "resume-ticket"):
            rc = groups.get((payload, condition(impairment, resume, devices, stack), scenario))
            f_res = _resumed_fixed(rc[0], m) if rc and _is_tls(rc[0]) else None
            if f_res is not None and rc:
                out.append(Cost(payload, where, scenario, _resumed_label(rc[0], resume), f_res, m))
    return out


def _without_stack(rest: str) -> tuple[str, str]:
    """A condition's tail without the device stack's token (results/bundle.py protocol), and that token ("" for
    the default stack): "reconnect + mbedtls-3.6" -> ("reconnect", "mbedtls-3.6")."""
    parts = rest.split(" + ") if rest != PERSISTENT else []
    stack = STACK_TOKEN if STACK_TOKEN in parts else ""
    kept = [p for p in parts if p != STACK_TOKEN]
    return (" + ".join(kept) or PERSISTENT), stack


def _resumed_label(cell: Cell, resume: str) -> str:
    """How the resumed connections resumed: by ID or ticket (TLS 1.2), by a ticket's PSK (TLS 1.3)."""
    kinds = (_lifecycle(cell) or {}).get("by_kind") or {}
    return "resumed (ticket, TLS 1.3 PSK)" if "resumed-psk" in kinds else f"resumed ({resume[7:]})"


def _mode_and_devices(rest: str) -> tuple[str, int]:
    """("reconnect", 20) of a condition's tail "reconnect + 20 devices" (results/bundle.py condition)."""
    mode, devices = rest, 1
    for part in rest.split(" + "):
        if part.endswith(" devices") and part.split()[0].isdigit():
            devices = int(part.split()[0])
            mode = rest.replace(" + " + part, "").replace(part, "") or "persistent"
    return mode, devices


def _is_tls(cell: Cell) -> bool:
    return bool(((cell.metrics or {}).get("inputs") or {}).get("tls"))


def break_even(cost: Cost, plain: Cost | None) -> str:
    """Readings per connection at which ``cost`` per reading is at most plain's at K = 1."""
    if plain is None or cost.mode == "plain":
        return NA
    room = plain.at(1) - cost.per_reading
    if room <= 0:
        return "never (a TLS reading alone costs more)"
    return str(max(1, math.ceil(cost.fixed / room)))


def cost_rows(all_costs: Sequence[Cost]) -> list[tuple[str, ...]]:
    plains = {(c.payload, c.impairment): c for c in all_costs if c.mode == "plain"}
    return [(str(c.payload), c.impairment, c.scenario, c.mode, f"{c.fixed:.0f}", f"{c.per_reading:.1f}",
             *(f"{c.at(k):.1f}" for k in K_SHOWN), break_even(c, plains.get((c.payload, c.impairment))))
            for c in all_costs]


def figures(groups: dict[tuple[int, str, str], list[Cell]]) -> list[Figure]:
    """The cost-per-reading plot, when the bundle has what the model needs."""
    all_costs = costs(groups)
    png = plots.cost_per_reading([(f"{c.scenario} {c.mode} ({c.payload} B)", c.fixed, c.per_reading)
                                  for c in all_costs], K_SHOWN)
    return [] if png is None else [Figure("plots/cost_per_reading.png", "Wire bytes per reading against readings "
                                          "per connection (K), from the measured F and m", png)]


ABOUT = (
    "Connection lifecycle: cells whose publisher connects, publishes K readings, ends the connection and "
    "sleeps (reconnect: every TLS handshake full; resume-id / resume-ticket: TLS 1.2 session resumption, and "
    "under TLS 1.3 resume-ticket resumes by the ticket's PSK). Handshakes are classified from the capture (a "
    "resumed TLS 1.2 handshake has no Certificate; by ticket when the ClientHello carried one, by ID when the "
    "ServerHello echoed the offered ID; a resumed TLS 1.3 handshake's ServerHello carries pre_shared_key); the "
    "publisher's own claim is compared with it. Wire bytes: every frame of the publisher's connections, "
    "all headers, both directions."
)
MODEL = (
    "Cost model: a connection costs F bytes (set-up, handshake, CONNECT/CONNACK, ending) plus m per "
    "reading, so a reading costs F/K + m; F (full) and m are solved from the persistent and the reconnect "
    "cell of the same scenario and device stack, F (resumed) from the resumed connections of the resume "
    "cells. Break-even "
    "K: the readings per connection at which a TLS mode costs no more per reading than plain MQTT "
    "reconnecting for every reading. Bytes only; the broker's CPU per handshake is bench/handshake_cpu.py's."
)


def lifecycle_section(cells: Sequence[Cell], groups: dict[tuple[int, str, str], list[Cell]]) -> list[Block]:
    rows = lifecycle_cell_rows(cells)
    if not rows:
        return []
    blocks: list[Block] = [Heading(2, TITLE), Paragraph(ABOUT),
                           Table(COLUMNS, tuple(rows), "The publisher's connections, from the capture")]
    all_costs = costs(groups)
    if all_costs:
        blocks += [Paragraph(MODEL), Table(COST_COLUMNS, tuple(cost_rows(all_costs)), "TLS cost per reading")]
    return blocks
