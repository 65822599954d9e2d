"""cell.json: the record of one cell, written by measure/ as the cell runs and read by report/ (one model for both).

Versioned like manifest.json and metrics.json (results/schema.py): a cell.json written before it carried a
``schema_version`` is version 0 and is read as version 1 (the same keys); version 2 added ``order`` (where the cell
ran in its sweep and in its block) and ``lab`` (what of the lab the cell had fresh and what it reused from the cell
before it in its block, and how its packets were cut from the block's one capture); later keys of version 2 are
optional, absent where a cell recorded none (``events``, ``images``: what its containers ran). Only the fields a
cell actually recorded are written (a virtual device's cell has no ``board``, a single-host cell no ``hosts``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model.axes import NO_IMPAIRMENT, PERSISTENT
from orchestrator.model.layout import SCHEMA_VERSIONS

Status = Literal["running", "ok", "failed", "interrupted"]


class CellRecord(BaseModel):
    """What was asked, what happened (status, error, per-phase timings) and what the cell recorded beside it."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    schema_version: int = SCHEMA_VERSIONS["cell"]
    cell_id: str = Field(min_length=1)
    scenario: str = Field(min_length=1)
    payload: int = Field(ge=0)
    impairment: str = NO_IMPAIRMENT
    repeat: int = Field(default=1, ge=1)
    connection: dict[str, Any] | None = None  # asked, used, per_connection, close, note (absent: persistent)
    spec: dict[str, Any] | None = None  # the RunSpec as run (absent in cells recorded before it was kept)
    status: Status
    error: str | None = None
    started_utc: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)  # <phase>_s: seconds from the previous phase
    exposure: dict[str, Any] | None = None  # a board's cell: where the broker was reachable and how it authenticated
    broker_nofile: int | None = None  # a fleet's cell: the Mosquitto process's open-file limit
    broker: dict[str, Any] | None = None  # a QoS 1/2 or persistent-session cell: the broker's persistence setting
    impairment_state: dict[str, Any] | None = None  # the run's impairment.json, as it was after the cell
    board: dict[str, Any] | None = None  # a board's banner (chip, MAC, firmware, versions, ...)
    device: dict[str, Any] | None = None  # a virtual device: its TLS library as it names it (asked: spec)
    # the images its containers ran: role (compose service, impairment helper) -> {image: the tag it was created from,
    # id: the container's image (docker inspect .Image), versions: packages read inside that image}
    images: dict[str, dict[str, Any]] | None = None
    warnings: list[str] = Field(default_factory=list)
    order: dict[str, Any] | None = None  # a sweep's cell: mode, position/of, block, position/size in the block
    lab: dict[str, Any] | None = None  # kept-up or fresh: what was fresh, what reused, the capture's cut
    hosts: list[dict[str, Any]] | None = None  # a cell across lab hosts: every host (lab/collect.py host_record)
    inventory: dict[str, Any] | None = None  # ... and the inventory it ran from (source, copy in the run folder)
    events: list[dict[str, Any]] | None = None  # the --events as they happened (measure/events.py)
    # a fleet's cell: whether its loader fell behind and whether the broker was its ceiling (metrics.json
    # fleet.limited, analysis/fleetlag.py): loader, broker (true / false / None: not judged), labels, late
    limited: dict[str, Any] | None = None
    received: int | None = None
    publisher_exit_code: int | None = None
    finished_utc: str | None = None

    @property
    def connection_mode(self) -> str:
        """The mode the cell was asked for (a plain cell asked to resume runs as reconnect, and says so)."""
        return str((self.connection or {}).get("asked") or PERSISTENT)

    @property
    def devices(self) -> int:
        """A fleet's size (1: the classic single device, also for cells recorded before fleets)."""
        value = (self.spec or {}).get("devices")
        return value if isinstance(value, int) and value > 0 else 1

    def to_json(self) -> dict[str, Any]:
        """The JSON object of cell.json: the version and every field the cell set, nothing it did not."""
        return self.model_dump(mode="json", include={"schema_version"} | self.model_fields_set)
