"""A sweep's plan: the matrix of cells, validated completely before anything starts.

SweepPlan's and Cell's fields are made from the axis table (orchestrator/model/axes.py): an axis `sweep`
can list becomes a list (its plural name) and a field of every Cell, named in the cell id; the others are
one value for every cell. Every combination of the lists is checked by the rules on the axes' values
(orchestrator/model/rules.py); the rules that read a cell's scenario or profile, cell by cell, by
orchestrator/model/plancheck.py before a sweep starts.
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import AfterValidator, ConfigDict, Field, create_model, model_validator

from orchestrator.model import rules
from orchestrator.model.axes import AXES, Axis, AxisTable
from orchestrator.model.run import OneValueAxes, RunSpec, RunSpecBase, axis_field, run_spec_model
from orchestrator.model.yamlfile import Finite


class CellBase(Finite):
    """One cell of a sweep: a value of every listed axis and the repeat."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    axes: ClassVar[AxisTable] = AXES

    if TYPE_CHECKING:
        scenario: str
        payload: int
        impairment: str
        repeat: int
        connection: str
        devices: int
        qos: int

    @property
    def cell_id(self) -> str:
        """``tls-65B-none-r1``: each listed axis's key in the table's order (a connection mode other than
        persistent, and a fleet's size, ``-1000dev``, only when given), then the repeat."""
        keys = [a.cell(getattr(self, a.name)) if a.cell else str(getattr(self, a.name)) for a in self.axes.sweep_axes()]
        return "-".join([k for k in keys if k] + [f"r{self.repeat}"])


class SweepPlanBase(OneValueAxes):
    model_config = ConfigDict(extra="forbid")
    axes: ClassVar[AxisTable] = AXES
    cell_model: ClassVar[type[CellBase]] = CellBase
    run_model: ClassVar[type[RunSpecBase]] = RunSpecBase

    if TYPE_CHECKING:  # the lists and the sweep's own
        scenarios: list[str]
        payloads: list[int]
        impairments: list[str]
        connections: list[str]
        devices: list[int]
        qos: list[int]
        repeat: int
        baseline: str
        order: str
        fresh_lab_per_cell: bool

    def _lists(self) -> list[tuple[Axis, list[Any]]]:
        return [(a, getattr(self, a.sweep.name)) for a in self.axes.sweep_axes() if a.sweep is not None]

    def _combinations(self) -> list[dict[str, Any]]:
        """Every run's axis values but the seed (which the repeat sets): the lists' product."""
        one = {a.name: (a.default if not a.in_sweep else getattr(self, a.name))
               for a in self.axes.run_axes() if a.sweep is None}
        lists = self._lists()
        return [one | {a.name: v for (a, _), v in zip(lists, combo, strict=True)}
                for combo in itertools.product(*(values for _, values in lists))]

    @model_validator(mode="after")
    def _rules(self) -> SweepPlanBase:
        rules.check_sweep({"seed": self.seed, "repeat": self.repeat})
        for values in self._combinations():
            rules.check_rules(self.axes, values)
        twice = sorted(i for i, n in collections.Counter(c.cell_id for c in self.cells()).items() if n > 1)
        if twice:  # e.g. `tls,./x/tls.yaml`: one run folder for two cells, the second deleting the first
            raise rules.RuleViolation(
                "cell-ids-unique", f"two cells would be named {twice[0]!r}: scenarios or impairment profiles whose "
                "file names share a stem (e.g. tls and ./x/tls.yaml) write one run folder; rename one of the files")
        return self

    def cells(self) -> list[CellBase]:
        """Every cell, in the plan's order (``order``; the seed is recorded in the manifest): blocked (the default)
        runs the cells that share a lab configuration as one block, blocks and the cells within each in a seeded
        random order; random shuffles every cell; as-listed is the lists' product, repeats outermost."""
        nested = sorted(self._lists(), key=lambda item: item[0].sweep.nest if item[0].sweep else 0)
        cells = [self.cell_model(repeat=r, **{a.name: v for (a, _), v in zip(nested, combo, strict=True)})
                 for r in range(1, self.repeat + 1) for combo in itertools.product(*(vs for _, vs in nested))]
        rng = random.Random(self.seed)
        if self.order == "random":
            rng.shuffle(cells)
        elif self.order == "blocked":
            by_key: dict[tuple[Any, ...], list[CellBase]] = {}
            for cell in cells:
                by_key.setdefault(self.lab_key(cell), []).append(cell)
            blocks = list(by_key.values())
            rng.shuffle(blocks)
            for block in blocks:
                rng.shuffle(block)
            cells = [cell for block in blocks for cell in block]
        return cells

    def lab_key(self, cell: CellBase) -> tuple[Any, ...]:
        """What a cell's lab is configured from: the listed axes marked ``lab`` (scenario, impairment, fleet size)
        and the repeat (each repeat of a configuration is a block of its own, on a lab of its own)."""
        return (*(getattr(cell, a.name) for a in self.axes.sweep_axes() if a.sweep is not None and a.sweep.lab),
                cell.repeat)

    def blocks(self, cells: list[CellBase] | None = None) -> list[list[CellBase]]:
        """``cells`` (the plan's by default) as blocks: each run of consecutive cells that share a lab key."""
        out: list[list[CellBase]] = []
        for cell in self.cells() if cells is None else cells:
            if out and self.lab_key(out[-1][0]) == self.lab_key(cell):
                out[-1].append(cell)
            else:
                out.append([cell])
        return out

    def order_record(self) -> dict[str, Any]:
        """The manifest's statement of the order: its mode, seed and blocks (each its cells in order)."""
        return {"mode": self.order, "seed": self.seed, "fresh_lab_per_cell": self.fresh_lab_per_cell,
                "blocks": [[c.cell_id for c in block] for block in self.blocks()]}

    def run_spec(self, cell: CellBase) -> RunSpecBase:
        """The cell's run: its listed values, the plan's others; repeat r runs with seed + r - 1."""
        values = {a.name: getattr(cell if a.sweep is not None else self, a.name)
                  for a in self.axes.run_axes() if a.in_sweep}
        return self.run_model(**values | {"seed": self.seed + cell.repeat - 1})


def _item_check(axis: Axis) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        problem = axis.range_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    return check


def _no_duplicates(axis: Axis) -> Callable[[list[Any]], list[Any]]:
    def check(values: list[Any]) -> list[Any]:
        twice = [v for i, v in enumerate(values) if v in values[:i]]
        if twice:
            raise ValueError(f"a {axis.name} is listed twice ({twice[0]})")
        return values
    return check


def _list_field(axis: Axis) -> tuple[Any, Any]:
    assert axis.sweep is not None
    item = Annotated[axis.type, AfterValidator(_item_check(axis))] if axis.bounds() else axis.type
    default = list(axis.sweep.default)
    return (Annotated[list[item], AfterValidator(_no_duplicates(axis))],  # type: ignore[valid-type]
            Field(default_factory=lambda: list(default), min_length=1, description=axis.sweep.help))


def sweep_models(table: AxisTable) -> tuple[type[RunSpecBase], type[CellBase], type[SweepPlanBase]]:
    """RunSpec, Cell and SweepPlan for ``table``."""
    run_model = run_spec_model(table)
    cell_fields: dict[str, Any] = {a.name: (a.type, ...) for a in table.sweep_axes()}
    cell_model = create_model("Cell", __base__=CellBase, __module__=__name__, repeat=(int, ...), **cell_fields)
    plan_fields: dict[str, Any] = {a.sweep.name if a.sweep else a.name: _list_field(a) if a.sweep else axis_field(a)
                                   for a in table if a.in_sweep}
    plan_model = create_model("SweepPlan", __base__=SweepPlanBase, __module__=__name__, **plan_fields)
    for model in (cell_model, plan_model):
        model.axes = table
    plan_model.cell_model, plan_model.run_model = cell_model, run_model
    return run_model, cell_model, plan_model


if TYPE_CHECKING:
    Cell = CellBase
    SweepPlan = SweepPlanBase
else:
    _, Cell, SweepPlan = sweep_models(AXES)
    SweepPlan.run_model = RunSpec  # the one RunSpec of orchestrator/model/run.py
