"""A sweep's plan checked cell by cell against every rule, before anything of the run exists.

SweepPlan itself refuses the combinations of its lists that break a rule on the axes' values alone
(orchestrator/model/sweep.py). The rules that need a cell's scenario or impairment profile read (the device
speaks TLS 1.2, a board's rate is its radio, a lab impairs publisher->broker only, ...) are checked here, for every
distinct cell of the plan (repeats of one configuration differ only in their seed and are checked once each, which
costs microseconds): a plan with impossible cells is refused in one TestbedError that names each of them with its
rule, and a hint naming the listed values whose removal leaves no impossible cell.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import TestbedError
from orchestrator.model import rules
from orchestrator.model.impairment import Impairment, load_impairment
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.model.sweep import Cell, SweepPlan

PLAN_REFUSED_EXIT = 2  # as a usage error: the command line asks for cells that cannot run


@dataclass(frozen=True)
class Impossible:
    """One cell of the plan and a rule it breaks."""

    cell: Cell
    violation: rules.RuleViolation

    @property
    def rule(self) -> str:
        return self.violation.rule


def _cached(load: Callable[[str], Any]) -> Callable[[str], Any]:
    seen: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in seen:
            seen[name] = load(name)
        return seen[name]
    return get


def canonical_cells(plan: SweepPlan) -> list[Cell]:
    """The plan's cells in the lists' product order (repeats outermost), whatever its ``order``: a refusal names
    them in the same order for every order of the same plan."""
    return plan.model_copy(update={"order": "as-listed"}).cells()


def impossible_cells(plan: SweepPlan, cells: list[Cell] | None = None) -> list[Impossible]:
    """Every (cell, rule) of ``plan`` that cannot run, in canonical order (``cells``: the canonical cells, when the
    caller has them); each distinct cell checked once (its repeats differ only in their seed, which the sweep's own
    rules check once per plan, as SweepPlan's combinations are)."""
    scenario: Callable[[str], Scenario] = _cached(load_scenario)
    profile: Callable[[str], Impairment] = _cached(load_impairment)
    verdicts: dict[Hashable, list[rules.RuleViolation]] = {}
    found: list[Impossible] = []
    listed = plan.axes.sweep_axes()
    for cell in canonical_cells(plan) if cells is None else cells:
        key = tuple(getattr(cell, a.name) for a in listed)
        if key not in verdicts:
            values = plan.run_spec(cell).values()
            verdicts[key] = rules.cell_violations(plan.axes, scenario(values["scenario"]),
                                                  profile(values["impairment"]), values)
        found += [Impossible(cell, v) for v in verdicts[key]]
    return found


def drop_hint(plan: SweepPlan, every: list[Cell], bad: list[Cell]) -> str | None:
    """The listed values whose removal leaves none of ``bad`` (each list keeping a value), the one that gives up
    the fewest possible cells of ``every`` first; None when no single list can."""
    bad_ids = {id(c) for c in bad}
    options: list[tuple[int, str]] = []
    for axis in plan.axes.sweep_axes():
        assert axis.sweep is not None
        listed = getattr(plan, axis.sweep.name)
        in_bad = {getattr(c, axis.name) for c in bad}
        hit = [v for v in listed if v in in_bad]
        if len(hit) == len(listed):
            continue
        lost = sum(1 for c in every if id(c) not in bad_ids and getattr(c, axis.name) in in_bad)
        flag = "--" + axis.sweep.name.replace("_", "-")
        options.append((lost, f"{', '.join(str(v) for v in hit)} from {flag}"))
    return " or ".join(text for _, text in sorted(options, key=lambda o: o[0])) or None


def refusal(plan: SweepPlan, every: list[Cell], found: list[Impossible]) -> TestbedError:
    """One error for every impossible cell of ``plan`` (``every``: its canonical cells): the cells with their rules,
    each one's text, and the hint."""
    cells = list(dict.fromkeys(i.cell.cell_id for i in found))
    named = ", ".join(f"{i.cell.cell_id} (rule {i.rule})" for i in found)
    by_rule: dict[str, list[Impossible]] = {}
    for item in found:
        by_rule.setdefault(item.rule, []).append(item)
    hints = []
    for rule, items in by_rule.items():
        drop = drop_hint(plan, every, [i.cell for i in items])
        about = f" (rule {rule})" if len(by_rule) > 1 else ""
        hints.append(f"drop {drop}{about}" if drop else
                     f"no one listed value makes rule {rule} refuse: change an option the cells share, or split "
                     "the sweep")
    return TestbedError(f"{len(cells)} of the plan's {len(every)} cells cannot run: {named}",
                        evidence="\n".join(f"{i.cell.cell_id}: {i.violation}" for i in found),
                        hint="; ".join(hints), exit_code=PLAN_REFUSED_EXIT)


def check_cells(plan: SweepPlan) -> None:
    """Refuse ``plan`` when any of its cells breaks a rule (TestbedError naming every such cell)."""
    every = canonical_cells(plan)
    found = impossible_cells(plan, every)
    if found:
        raise refusal(plan, every, found)
