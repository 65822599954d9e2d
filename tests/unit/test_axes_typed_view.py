"""The typed views of RunSpec, Cell and SweepPlan (``if TYPE_CHECKING:`` annotations, for the type checker
only) name nothing the axis table does not make: every annotated attribute is a field of the model built
from the table, a list exactly where `sweep` lists the axis."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel

from orchestrator.model.run import RunSpec
from orchestrator.model.sweep import Cell, SweepPlan

MODEL = Path(__file__).resolve().parents[2] / "orchestrator" / "model"


def typed_view(path: Path, cls: str) -> dict[str, str]:
    """The names and annotations inside the class's ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    blocks = [n for n in node.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    return {ast.unparse(a.target): ast.unparse(a.annotation)
            for b in blocks for a in b.body if isinstance(a, ast.AnnAssign)}


@pytest.mark.parametrize("path,cls,models", [
    ("run.py", "OneValueAxes", (RunSpec, SweepPlan)),
    ("run.py", "RunSpecBase", (RunSpec,)),
    ("sweep.py", "CellBase", (Cell,)),
    ("sweep.py", "SweepPlanBase", (SweepPlan,)),
])
def test_every_typed_attribute_is_a_field_made_from_the_table(path: str, cls: str,
                                                              models: tuple[type[BaseModel], ...]) -> None:
    view = typed_view(MODEL / path, cls)
    assert view, f"{cls} has no typed view"
    for model in models:
        fields = model.model_fields
        assert set(view) <= set(fields), f"{cls} names what {model.__name__} lacks: {set(view) - set(fields)}"
        for name, annotation in view.items():
            is_list = getattr(fields[name].annotation, "__origin__", None) is list
            assert annotation.startswith("list[") == is_list, f"{model.__name__}.{name}: {annotation}"
