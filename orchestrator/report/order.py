"""The order of scenarios and cells in every output, the cells that differ only by repeat, and the order the cells
ran in."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from orchestrator.report.loader import Cell

GroupKey = tuple[int, str, str]  # (payload, impairment, scenario)


def scenario_order(names: Iterable[str], baseline: str) -> list[str]:
    """Baseline first, then the others alphabetically."""
    unique = sorted(set(names))
    return ([baseline] if baseline in unique else []) + [n for n in unique if n != baseline]


def cell_sort_key(order: Sequence[str]) -> Callable[[Cell], tuple[int, str, int, int, str]]:
    """Cells by payload, impairment, scenario (in ``order``), repeat, id."""
    rank = {name: i for i, name in enumerate(order)}

    def key(cell: Cell) -> tuple[int, str, int, int, str]:
        r = cell.record
        return (r.payload, r.impairment, rank.get(r.scenario, len(rank)), r.repeat, r.cell_id)

    return key


def groups(cells: Sequence[Cell]) -> dict[GroupKey, list[Cell]]:
    """ok cells by (payload, impairment, scenario), repeats in order."""
    out: dict[GroupKey, list[Cell]] = {}
    for cell in sorted(cells, key=lambda c: (c.group, c.record.repeat, c.record.cell_id)):
        out.setdefault(cell.group, []).append(cell)
    return out


def group_keys(keys: Iterable[GroupKey], order: Sequence[str]) -> list[GroupKey]:
    """Group keys by payload, impairment, then scenario in ``order`` (unknown scenarios last)."""
    return sorted(keys, key=lambda k: (k[0], k[1], order.index(k[2]) if k[2] in order else len(order)))


def run_order(order: Any) -> str:
    """The order the cells ran in and how their labs were kept, from the manifest's ``order``
    (orchestrator/model/sweep.py order_record)."""
    if not isinstance(order, dict) or not isinstance(order.get("blocks"), list):
        return "not recorded (a bundle from before the blocked order)"
    sizes = sorted({len(b) for b in order["blocks"] if isinstance(b, list)})
    labs = ("a fresh lab per cell" if order.get("fresh_lab_per_cell")
            else "the lab kept up within a block (each cell's cell.json says what it reused)")
    return (f"{order.get('mode')}, seed {order.get('seed')}: {len(order['blocks'])} block(s) of "
            f"{'/'.join(str(s) for s in sizes)} cell(s), {labs}")
