"""What one run is asked to do (RunSpec), validated before anything starts.

RunSpec's fields are made from the axis table (orchestrator/model/axes.py): type, default, range, help.
Which combinations are allowed is decided by the named rules of orchestrator/model/rules.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ConfigDict, Field, create_model, model_validator

from orchestrator.model import rules
from orchestrator.model.axes import AXES, MAX_DEVICES, MAX_PAYLOAD, PERSISTENT, Axis, AxisTable, parse_interval
from orchestrator.model.rules import DEVICE_ID, FLEET_PREFIX, fleet_device_id, payload_min_size
from orchestrator.model.subscription import Subscription
from orchestrator.model.yamlfile import Finite

__all__ = ["DEVICE_ID", "FLEET_PREFIX", "MAX_DEVICES", "MAX_PAYLOAD", "RunSpec", "effective_connection",
           "fleet_device_id", "parse_interval", "payload_min_size", "run_spec_model"]


def effective_connection(connection: str, tls: bool) -> tuple[str, str | None]:
    """The mode a run uses, and why it differs from the one asked: plain MQTT has nothing to resume."""
    if not tls and connection.startswith("resume-"):
        return "reconnect", f"{connection} on plain MQTT runs as reconnect: there is no TLS session to resume"
    return connection, None


def axis_field(axis: Axis) -> tuple[Any, Any]:
    """A pydantic field of one value of ``axis``: its type, default, range, pattern and help."""
    limits: dict[str, Any] = {**axis.bounds(), **({"pattern": axis.pattern} if axis.pattern else {})}
    return axis.type, Field(default=axis.default, description=axis.help, **limits)


class OneValueAxes(Finite):
    """The axes a run and a sweep both hold as one value, typed for the type checker (the fields themselves
    come from the table: run_spec_model, sweep_models); every number finite (Finite)."""

    if TYPE_CHECKING:
        samples: int
        interval_ms: float
        delay_mechanism: str
        publisher: str
        serial_port: str | None
        baud: int
        board_host: str | None
        reset_board: bool
        seed: int
        per_connection: int
        close: str
        sleep_ms: float
        connect_rate: float
        inventory: str | None


class RunSpecBase(OneValueAxes):
    """What every RunSpec can do; the fields come from the table (run_spec_model)."""

    model_config = ConfigDict(extra="forbid")
    axes: ClassVar[AxisTable] = AXES

    if TYPE_CHECKING:  # the other attributes code reads by name
        scenario: str
        payload: int
        impairment: str
        device_id: str
        connection: str
        devices: int
        device_stack: str
        transport: str
        qos: int

    def values(self) -> dict[str, Any]:
        """Every axis's value by name."""
        return {a.name: getattr(self, a.name) for a in self.axes.run_axes()}

    @model_validator(mode="after")
    def _rules(self) -> RunSpecBase:
        rules.check_rules(self.axes, self.values())
        return self

    @property
    def subscription(self) -> Subscription:
        """The subscriber's QoS, MQTT version and session (the cell's axes), as every lab starts it."""
        return Subscription.of(self.values())

    @property
    def is_fleet(self) -> bool:
        return self.devices > 1

    @property
    def id_for_payload(self) -> str:
        """The longest device id the payload must hold."""
        return rules.id_for_payload(self.values())

    @property
    def connections_per_device(self) -> int:
        return 1 if self.connection == PERSISTENT else -(-self.samples // self.per_connection)

    @property
    def connections_expected(self) -> int:
        """Every device's connections (a fleet's devices each reconnect on the run's lifecycle)."""
        return self.devices * self.connections_per_device

    @property
    def messages_expected(self) -> int:
        """Every device publishes ``samples`` readings."""
        return self.devices * self.samples

    @property
    def expected_duration_s(self) -> float:
        """The schedule: a fleet's last device starts (devices - 1) / connect_rate seconds after the first."""
        start = (self.devices - 1) / self.connect_rate
        asleep = (self.connections_per_device - 1) * (self.sleep_ms - self.interval_ms) if self.sleep_ms else 0.0
        return start + (self.samples * self.interval_ms + max(asleep, 0.0)) / 1000.0

    def timeout_s(self) -> float:
        """How long to wait for the last message: the schedule plus a margin for start-up and slow links."""
        return self.expected_duration_s * 1.5 + 30.0


def run_spec_model(table: AxisTable) -> type[RunSpecBase]:
    """RunSpec for ``table``: one field per run axis, in the table's order."""
    fields: dict[str, Any] = {a.name: axis_field(a) for a in table.run_axes()}
    model = create_model("RunSpec", __base__=RunSpecBase, __module__=__name__, **fields)
    model.axes = table
    return model


if TYPE_CHECKING:
    RunSpec = RunSpecBase
else:
    RunSpec = run_spec_model(AXES)
