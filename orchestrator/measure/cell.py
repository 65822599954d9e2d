"""A cell as it runs: its record (cell.json, written at every step) and what it saw before its teardown."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends.docker import Container
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import write_json_atomic


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class CellRecord:
    """cell.json as the run goes: what was asked, status, error, per-phase timings."""

    def __init__(self, lay: Layout, info: dict[str, Any]) -> None:
        self.lay = lay
        self.info = info
        self.timings: dict[str, float] = {}
        self.info["timings"] = self.timings
        self._mark = time.monotonic()

    @property
    def cell_id(self) -> str:
        return str(self.info["cell_id"])

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.timings[f"{name}_s"] = round(now - self._mark, 3)
        self._mark = now

    def save(self, **fields: Any) -> None:
        self.info.update(fields)
        write_json_atomic(self.lay.cell, self.info)


@dataclass
class Observed:
    """What one run saw before its teardown."""

    received: int = 0
    publisher_exit_code: int | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    containers: list[Container] = field(default_factory=list)  # after the publisher, before the capture stops
    error: str | None = None


