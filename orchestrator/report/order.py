"""The order of scenarios and cells in every output, and the cells that differ only by repeat."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

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
