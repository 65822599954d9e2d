"""A sweep's plan: the matrix of cells, validated completely before anything starts."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.model.impairment import DelayMechanism
from orchestrator.model.run import (
    DEVICE_ID,
    MAX_DEVICES,
    MAX_PAYLOAD,
    Close,
    Connection,
    Publisher,
    QoS,
    RunSpec,
    check_board_options,
    check_fleet_connection,
    check_fleet_options,
    check_lab_options,
    fleet_device_id,
    payload_min_size,
)


class Cell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: str
    payload: int
    impairment: str
    repeat: int
    connection: Connection = "persistent"  # absent in plans recorded before it existed
    devices: int = 1  # a fleet's size (absent in plans recorded before it existed)

    @property
    def cell_id(self) -> str:
        """``tls-65B-none-r1``; a connection mode other than persistent, and a fleet's size (``-1000dev``),
        are named before the repeat."""
        scen = self.scenario.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")
        imp = self.impairment.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")
        conn = "" if self.connection == "persistent" else f"-{self.connection}"
        fleet = f"-{self.devices}dev" if self.devices > 1 else ""
        return f"{scen}-{self.payload}B-{imp}{conn}{fleet}-r{self.repeat}"


class SweepPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenarios: list[str] = Field(default_factory=lambda: ["plain", "tls"], min_length=1)
    payloads: list[int] = Field(default_factory=lambda: [65, 100], min_length=1)
    samples: int = Field(default=200, ge=1, le=1_000_000)
    repeat: int = Field(default=1, ge=1, le=100)
    interval_ms: float = Field(default=250.0, gt=0, le=3_600_000)
    qos: QoS = 0
    impairments: list[str] = Field(default_factory=lambda: ["none"], min_length=1)
    delay_mechanism: DelayMechanism = "auto"  # absent in plans recorded before it existed: auto
    publisher: Publisher = "virtual"
    serial_port: str | None = None
    baud: int = Field(default=115200, ge=300, le=4_000_000)
    board_host: str | None = None
    reset_board: bool = False
    seed: int = 1
    baseline: str = "plain"
    connections: list[Connection] = Field(default_factory=lambda: list[Connection](["persistent"]), min_length=1)
    per_connection: int = Field(default=1, ge=1, le=1_000_000)
    close: Close = "disconnect"
    devices: list[int] = Field(default_factory=lambda: [1], min_length=1)  # fleet sizes: a sweep axis
    connect_rate: float = Field(default=100.0, gt=0, le=10_000)
    inventory: str | None = None  # a lab across hosts (docs/multi-host.md); absent in older plans

    @field_validator("payloads")
    @classmethod
    def _payload_range(cls, v: list[int]) -> list[int]:
        for p in v:
            if p > MAX_PAYLOAD:
                raise ValueError(f"payload {p} B is above the maximum of {MAX_PAYLOAD} B")
        if len(set(v)) != len(v):
            raise ValueError("a payload is listed twice")
        return v

    @field_validator("devices")
    @classmethod
    def _devices_range(cls, v: list[int]) -> list[int]:
        for n in v:
            if not 1 <= n <= MAX_DEVICES:
                raise ValueError(f"devices {n} is outside 1..{MAX_DEVICES}")
        return v

    @model_validator(mode="after")
    def _payload_minimum(self) -> SweepPlan:
        most = max(self.devices)
        minimum = payload_min_size(self.samples, fleet_device_id(most - 1) if most > 1 else DEVICE_ID)
        low = [p for p in self.payloads if p < minimum]
        if low:
            raise ValueError(f"payload {low[0]} B is below the minimum of {minimum} B for {self.samples} samples")
        check_board_options(self.publisher, self.serial_port, self.board_host, self.reset_board)
        check_fleet_options(most, self.publisher)
        check_lab_options(self.inventory, self.publisher)
        for c in self.connections:
            check_fleet_connection(most, c)
        for name, items in (("scenarios", self.scenarios), ("impairments", self.impairments),
                            ("connections", self.connections), ("devices", self.devices)):
            if len(set(items)) != len(items):
                raise ValueError(f"{name}: an entry is listed twice")
        return self

    def cells(self) -> list[Cell]:
        """Every cell; in a seeded random order when repeated (the seed is recorded in the manifest)."""
        cells = [Cell(scenario=s, payload=p, impairment=i, repeat=r, connection=c, devices=n)
                 for r in range(1, self.repeat + 1) for i in self.impairments for c in self.connections
                 for n in self.devices for p in self.payloads for s in self.scenarios]
        if self.repeat > 1:
            random.Random(self.seed).shuffle(cells)
        return cells

    def run_spec(self, cell: Cell) -> RunSpec:
        return RunSpec(scenario=cell.scenario, payload=cell.payload, samples=self.samples,
                       interval_ms=self.interval_ms, qos=self.qos, impairment=cell.impairment,
                       delay_mechanism=self.delay_mechanism, publisher=self.publisher,
                       serial_port=self.serial_port, baud=self.baud, board_host=self.board_host,
                       reset_board=self.reset_board, seed=self.seed + cell.repeat - 1, device_id=DEVICE_ID,
                       connection=cell.connection, per_connection=self.per_connection, close=self.close,
                       devices=cell.devices, connect_rate=self.connect_rate, inventory=self.inventory)
