"""A cell as it runs: its record (cell.json, written at every step) and what it saw before its teardown."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends.docker import Container
from orchestrator.model.cell import CellRecord
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import write_json_atomic


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class CellWriter:
    """cell.json as the cell goes (orchestrator/model/cell.py CellRecord): written at every step, timed by phase."""

    def __init__(self, lay: Layout, record: CellRecord) -> None:
        self.lay = lay
        self.record = record
        self._mark = time.monotonic()

    @property
    def cell_id(self) -> str:
        return self.record.cell_id

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.record.timings[f"{name}_s"] = round(now - self._mark, 3)
        self._mark = now

    def set(self, **fields: Any) -> None:
        """Fields of the record set, written with the next save."""
        for name, value in fields.items():
            setattr(self.record, name, value)

    def warn(self, message: str) -> None:
        self.record.warnings = [*self.record.warnings, message]

    def save(self, **fields: Any) -> None:
        self.set(**fields)
        write_json_atomic(self.lay.cell, self.record.to_json())


@dataclass
class Observed:
    """What one run saw before its teardown."""

    received: int = 0
    publisher_exit_code: int | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    containers: list[Container] = field(default_factory=list)  # after the publisher, before the capture stops
    error: str | None = None


