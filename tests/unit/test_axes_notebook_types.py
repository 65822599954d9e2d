"""The notebook API types an axis's column as the axis table says (orchestrator/results/notebook.py), not by a
list of names restated beside the table: an integer axis is ``Int64`` in every frame, whatever its name ends
with (``ack_timeout_ms``, ``session_expiry_s``) and also when the table gained it after the list was written
(``inflight``)."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestrator.model.axes import AXES, Axis
from orchestrator.results import notebook


@pytest.mark.parametrize("axis", list(AXES), ids=lambda a: a.name)
def test_a_column_named_as_an_axis_has_the_axis_type(axis: Axis) -> None:
    name, want = axis.name, notebook.axis_dtype(axis.type)
    column = {"Int64": [1, 2], "float64": [1.5, 2.0], "boolean": [True, False]}.get(want, ["a", "b"])
    got = notebook.typed(pd.DataFrame({name: column}))[name].dtype
    assert str(got) == want, f"{name}: {got}, the table says {want}"


def test_no_axis_name_is_listed_by_hand() -> None:
    assert not notebook.INT_NAMES & {a.name for a in AXES}
    assert set(notebook.RECORD_DTYPES) & {a.name for a in AXES} == set()
