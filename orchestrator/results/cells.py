"""Reading cell.json (orchestrator/model/cell.py): its version checked and older migrated (results/schema.py),
then the model; an error names the file and the field."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import TestbedError
from orchestrator.model.cell import CellRecord
from orchestrator.model.yamlfile import describe_validation_error
from orchestrator.results.schema import read_versioned


def read_cell_record(path: Path) -> CellRecord:
    data = read_versioned(path, "cell")
    try:
        return CellRecord.model_validate(data)
    except ValidationError as exc:
        raise TestbedError(describe_validation_error(exc, str(path)).splitlines()[0]) from None


def cell_record_if_any(path: Path) -> CellRecord | None:
    """The record of a cell that got as far as writing one; None when it has none."""
    return read_cell_record(path) if path.is_file() else None
