"""Every run/sweep axis, declared once.

One row per axis: its Python type, range or choices and default, help text, whether `testbed sweep` can
list it (and the plural option that does), which publishers and sites take it, its key in the cell id and
how it reaches the device (the option of firmware/platformio/lib/testbed_core/src/device_options.def, which
is vdevice's and the fleet's ``--flag`` and the board's RUN key). From this table come the options of
`testbed run` and `testbed sweep` (orchestrator/cli/axis_options.py), RunSpec and SweepPlan with their
validation (orchestrator/model/run.py, sweep.py), the cell id, the device command lines
(orchestrator/publishers/virtual.py) and the board's RUN body (orchestrator/publishers/board/records.py).
Combinations of axes are decided by the named rules of orchestrator/model/rules.py.

A new axis is one more ``Axis(...)`` here (and, when it reaches the device, one line in the .def).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator.model.axis_help import (
    ACK_TIMEOUT_HELP,
    BROKER_HELP,
    CONNECTION_HELP,
    DEVICE_STACK_HELP,
    DEVICES_HELP,
    EVENTS_HELP,
    FRESH_LAB_HELP,
    ORDER_HELP,
    POWER_SAVE_HELP,
    RECONNECT_HELP,
    SESSION_HELP,
    SLEEP_HELP,
    SLEEP_MODE_HELP,
    TRANSPORT_HELP,
    parse_interval,
)
from orchestrator.model.events import check_events

MAX_PAYLOAD = 4096  # the firmware core's fixed buffer (payload.h kMaxPayload)
MAX_DEVICES, MAX_DEVICES_PER_HOST = 1_000_000, 10_000  # the fleet binary's kMaxDevices, kMaxDevicesPerHost
MAX_SEED = 2**64 - 1  # the device's sensors are seeded with a uint64
REQUIRED: Any = ...  # an axis every RunSpec must be given (pydantic's "no default")
NO_IMPAIRMENT = "none"  # the impairment profile that impairs nothing (the axis's default)
PERSISTENT = "persistent"  # the connection mode of the study: one connection for the run (the axis's default)

PublisherKind = Literal["virtual", "fleet", "esp32"]
Site = Literal["local", "inventory"]
Group = Literal["publish", "fleet", "lifecycle", "connection"]
ALL_PUBLISHERS: frozenset[str] = frozenset({"virtual", "fleet", "esp32"})
ALL_SITES: frozenset[str] = frozenset({"local", "inventory"})


def _absolute(path: Path | None) -> str | None:
    return str(path.resolve()) if path is not None else None


def stem(name: str) -> str:
    """A scenario's or profile's name in a cell id: a YAML file's stem, a built-in's name."""
    return name.rsplit("/", 1)[-1].removesuffix(".yaml").removesuffix(".yml")


def given(name: str) -> Callable[[Mapping[str, Any]], bool]:
    """A ``Device.when``: the axis ``name`` has a value other than its default (an absent one is the default)."""
    return lambda values: bool(name in values and values[name] != AXES[name].default)


_not_persistent = given("connection")


@dataclass(frozen=True)
class Device:
    """How an axis reaches the device programs.

    ``name`` is the option of device_options.def: vdevice's and the fleet's ``--name`` (``_`` -> ``-``) and,
    unless ``run_key`` says otherwise, the board's RUN key (``run_key=None``: the board has no such key).
    ``group``: ``publish`` goes to every program (vdevice, the fleet, the board); ``fleet`` only to the
    fleet; ``lifecycle`` to vdevice, the fleet and the board when ``when`` holds (a connection that is not persistent:
    the study's cells keep their command line and RUN unchanged); ``connection`` (the connection lifecycle
    itself) the same, and to every device of a fleet too.
    """

    name: str
    group: Group = "publish"
    run_key: str | None = ""
    run_value: Callable[[Any], Any] | None = None
    when: Callable[[Mapping[str, Any]], bool] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def board_key(self) -> str | None:
        return self.name if self.run_key == "" else self.run_key


@dataclass(frozen=True)
class SweepOption:
    """How `testbed sweep` lists an axis: the plural option and SweepPlan field, its default list; ``nest``
    orders the cells (lower nests further out, after the repeats)."""

    name: str
    default: tuple[Any, ...]
    help: str
    nest: int = 0
    lab: bool = False  # part of the lab's configuration: a sweep's block is the cells that share these (and a repeat)


@dataclass(frozen=True)
class Names:
    """How an axis names the condition a bundle's cell belongs to (results/bundle.py ``condition()``): cells
    whose values differ in such an axis are different conditions in summary.csv, comparisons.csv and the
    report, never repeats of one another.

    ``part``: ``own`` a `` + `` part of the name of its own (``none + resume-id + 1000 devices``), ``protocol``
    a word of the MQTT protocol's part, which comes last (``none + qos2 mqtt5``), ``key`` a key of the
    report's group beside the condition (the scenario, the payload: not in the name). ``word``: the word of a
    value other than the default (the default names nothing, unless ``keep_default``); None: the cell id's part
    (``Axis.cell``), else ``name=value``. ``order``: the place in its part (lower first, then the table's order).
    A sweep axis that declares none names an ``own`` part after the others with the default word.
    """

    part: Literal["key", "own", "protocol"] = "own"
    word: Callable[[Any], str] | None = None
    order: int = 50
    keep_default: bool = False


AS_KEY = Names("key")


@dataclass(frozen=True)
class Only:
    """A value other than the axis's default (or one of ``values``) needs one of these publishers and sites
    (rule ``rule``)."""

    rule: str
    text: str  # the refusal; {value} is the value given
    publishers: frozenset[str] = ALL_PUBLISHERS
    sites: frozenset[str] = ALL_SITES
    values: frozenset[Any] | None = None  # None: every value but the default

    def restricts(self, value: Any, default: Any) -> bool:
        return value != default and (self.values is None or value in self.values)


@dataclass(frozen=True)
class Axis:
    name: str
    type: Any  # the Python type of one value (a Literal for choices)
    default: Any
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    unit: str = ""  # in messages: "payload 5000 B is above the maximum of 4096 B"
    pattern: str | None = None
    scope: Literal["both", "run", "sweep"] = "both"  # RunSpec and SweepPlan, RunSpec only, SweepPlan only
    option: str | None = ""  # the CLI option's name ("": the axis's name; None: not on the command line)
    cli_type: Any = None  # what the CLI reads when it differs from ``type`` (then ``from_cli`` converts)
    cli_default: Any = REQUIRED  # when it differs from ``default``
    from_cli: Callable[[Any], Any] | None = None
    sweep_help: str | None = None  # `sweep --help` when it differs from ``help``
    sweep: SweepOption | None = None  # `testbed sweep` can list it
    only: Only | None = None
    cell: Callable[[Any], str] | None = None  # its part of the cell id ("" leaves it out); sweep axes only
    device: Device | None = None
    names: Names | None = None  # how it names a cell's condition (a sweep axis always does: Names)
    host: bool = False  # where the lab is (a port, an inventory): `sweep --plan` may give its own

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return tuple(self.type.__args__) if getattr(self.type, "__origin__", None) is Literal else None

    @property
    def in_run(self) -> bool:
        return self.scope in ("both", "run")

    @property
    def in_sweep(self) -> bool:
        return self.scope in ("both", "sweep")

    @property
    def flag(self) -> str:
        return "--" + (self.option or self.name).replace("_", "-")

    @property
    def command_default(self) -> Any:
        return self.default if self.cli_default is REQUIRED else self.cli_default

    @property
    def condition(self) -> Names | None:
        """How it names a condition: its own ``names``, and for a sweep axis that declares none the default."""
        return self.names if self.names is not None or self.sweep is None else Names()

    def word(self, value: Any) -> str:
        """Its word in a condition's name ("" for none)."""
        n = self.condition
        if n is None or n.part == "key" or (value == self.default and not n.keep_default):
            return ""
        if n.word is not None:
            return n.word(value)
        return (self.cell(value) if self.cell else "") or f"{self.name}={value}"

    def bounds(self) -> dict[str, float]:
        return {k: v for k, v in (("ge", self.ge), ("gt", self.gt), ("le", self.le)) if v is not None}

    def range_problem(self, value: Any) -> str | None:
        """Why one listed value is out of range (a sweep's lists are checked item by item)."""
        unit = f" {self.unit}" if self.unit else ""
        low = self.ge if self.ge is not None else self.gt
        if low is not None and (value < low or (self.gt is not None and value == self.gt)):
            return f"{self.name} {value}{unit} is below the minimum of {low}{unit}"
        if self.le is not None and value > self.le:
            return f"{self.name} {value}{unit} is above the maximum of {self.le}{unit}"
        return None


@dataclass(frozen=True)
class AxisTable:
    axes: tuple[Axis, ...]
    by_name: dict[str, Axis] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {a.name: a for a in self.axes})
        if len(self.by_name) != len(self.axes):
            raise ValueError("an axis is declared twice")

    def __iter__(self) -> Iterator[Axis]:
        return iter(self.axes)

    def __getitem__(self, name: str) -> Axis:
        return self.by_name[name]

    def with_axis(self, axis: Axis) -> AxisTable:
        """This table and one more axis (e.g. a test's throwaway axis)."""
        return replace(self, axes=(*self.axes, axis))

    def run_axes(self) -> tuple[Axis, ...]:
        return self._run_axes

    def sweep_axes(self) -> tuple[Axis, ...]:
        """The axes `sweep` lists, in the order of the cell id."""
        return self._sweep_axes

    def device_axes(self) -> tuple[Axis, ...]:
        return self._device_axes

    def condition_axes(self, part: Literal["own", "protocol"]) -> tuple[Axis, ...]:
        """The axes that name a part of a condition, in their order (results/bundle.py condition())."""
        named = [(a.condition.order, i, a) for i, a in enumerate(self.axes)
                 if a.condition is not None and a.condition.part == part]
        return tuple(a for _, _, a in sorted(named, key=lambda t: t[:2]))

    def value(self, values: Mapping[str, Any], name: str) -> Any:
        """``values[name]``, or the axis's default when it is not there (a cell recorded before the axis)."""
        return values.get(name, self[name].default)

    def is_default(self, values: Mapping[str, Any], name: str) -> bool:
        return bool(self.value(values, name) == self[name].default)

    @functools.cached_property
    def _run_axes(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if a.in_run)

    @functools.cached_property
    def _sweep_axes(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if a.sweep is not None)

    @functools.cached_property
    def _device_axes(self) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if a.device is not None)


_RECONNECT_ONLY = Only("reconnect-is-the-virtual-devices", "--reconnect {value}: the reconnect policy is the virtual "
                       "devices' (vdevice and the fleet, --publisher virtual)",
                       publishers=frozenset({"virtual", "fleet"}))
_EVENTS_HERE = Only("events-run-on-this-host", "--events {value}: a cell's events are run by this host's lab (its "
                    "containers): a lab inventory's cell would run without them", sites=frozenset({"local"}))


def _backoff(values: Mapping[str, Any]) -> bool:
    return bool(values.get("reconnect") == "backoff")


_NOT_THE_FLEET = Only("sleep-modes-are-one-devices", "--sleep-mode and --power-save ({value}) are one device's: "
                      "vdevice emulates them, a board does them, the fleet does not",
                      publishers=frozenset({"virtual", "esp32"}))
_BOARD_ONLY = Only("board-options-need-esp32", "--serial-port, --board-host and --reset-board are for --publisher "
                   "esp32", publishers=frozenset({"esp32"}), sites=frozenset({"local"}))

AXES = AxisTable((
    Axis("scenario", str, REQUIRED, "built-in scenario name or a YAML file", cli_default="tls",
         sweep=SweepOption("scenarios", ("plain", "tls"), "comma list of scenarios (names or YAML files)", nest=5,
                     lab=True),
         cell=stem, names=AS_KEY),
    Axis("payload", int, 65, "application payload bytes (exact)", ge=1, le=MAX_PAYLOAD, unit="B",
         sweep=SweepOption("payloads", (65, 100), "comma list of payload sizes in bytes", nest=4),
         cell=lambda v: f"{v}B", device=Device("payload"), names=AS_KEY),
    Axis("samples", int, 200, "messages to publish", ge=1, le=1_000_000, sweep_help="messages per cell",
         device=Device("samples")),
    Axis("repeat", int, 1, "repeats of every cell (random order, seeded)", ge=1, le=100, scope="sweep"),
    Axis("interval_ms", float, 250.0, "time between messages, e.g. 250ms or 1s", gt=0, le=3_600_000,
         option="interval", cli_type=str, cli_default="250ms", from_cli=parse_interval,
         device=Device("interval_ms", run_key="interval_us", run_value=lambda ms: round(ms * 1000))),
    Axis("qos", Literal[0, 1, 2], 0, "MQTT QoS 0, 1 or 2 (the publisher's and the subscriber's)",
         sweep=SweepOption("qos", (0,), "comma list of MQTT QoS levels (0,1,2)", nest=6),
         cell=lambda v: f"qos{v}" if v else "", device=Device("qos"),
         names=Names("protocol", lambda v: f"qos{v}", 1)),
    Axis("mqtt", Literal["3.1.1", "5"], "3.1.1", "MQTT version of the publisher and the subscriber",
         sweep=SweepOption("mqtt", ("3.1.1",), "comma list of MQTT versions (3.1.1,5)", nest=7),
         cell=lambda v: "" if v == "3.1.1" else f"mqtt{v}", names=Names("protocol", lambda v: f"mqtt{v}", 2),
         device=Device("mqtt", "lifecycle", when=given("mqtt"))),
    Axis("session", Literal["clean", "persistent"], "clean", SESSION_HELP,
         names=Names("protocol", lambda v: f"{v}-session", 4),
         device=Device("session", "lifecycle", when=given("session"))),
    Axis("session_expiry_s", int, 3600, "MQTT 5: the persistent session's expiry interval (s)", ge=0,
         le=4_294_967_295, device=Device("session_expiry_s", "lifecycle",
                       when=lambda v: v.get("mqtt") == "5" and v.get("session") == "persistent")),
    Axis("topic_alias", Literal["off", "on"], "off",
         "MQTT 5: topic alias 1 (the PUBLISHes after the first carry an empty topic)",
         names=Names("protocol", lambda v: "alias", 3),
         device=Device("topic_alias", "lifecycle", when=given("topic_alias"))),
    Axis("inflight", int, 1, "QoS 1/2 messages sent and not yet acknowledged at most (1: each waits for its ack)",
         ge=1, le=256, names=Names("protocol", lambda v: f"inflight{v}", 5),
         device=Device("inflight", "lifecycle", when=given("inflight"))),
    Axis("ack_timeout_ms", int, 10000, ACK_TIMEOUT_HELP, ge=1, le=3_600_000, option="ack_timeout",
         device=Device("ack_timeout_ms", "lifecycle", when=given("ack_timeout_ms"))),
    Axis("reconnect", Literal["off", "immediate", "backoff"], "off", RECONNECT_HELP, only=_RECONNECT_ONLY,
         device=Device("reconnect", "lifecycle", run_key=None, when=given("reconnect"))),
    Axis("reconnect_base_ms", float, 500.0, "backoff: the first attempt's ceiling, e.g. 0.5s", ge=1, le=3_600_000,
         option="reconnect_base", cli_type=str, cli_default="500ms", from_cli=parse_interval, only=_RECONNECT_ONLY,
         device=Device("reconnect_base_ms", "lifecycle", run_key=None, when=_backoff)),
    Axis("reconnect_cap_ms", float, 8000.0, "backoff: the largest ceiling, e.g. 8s", ge=1, le=3_600_000,
         option="reconnect_cap", cli_type=str, cli_default="8s", from_cli=parse_interval, only=_RECONNECT_ONLY,
         device=Device("reconnect_cap_ms", "lifecycle", run_key=None, when=_backoff)),
    Axis("events", str, "", EVENTS_HELP, pattern=r"^[a-z0-9@:.,\-]*$", from_cli=check_events, only=_EVENTS_HERE),
    Axis("impairment", str, NO_IMPAIRMENT, "impairment profile name or YAML file",
         sweep=SweepOption("impairments", (NO_IMPAIRMENT,), "comma list of impairment profiles", nest=1, lab=True),
         cell=stem, names=Names(word=str, order=0, keep_default=True)),
    Axis("delay_mechanism", Literal["auto", "netem", "queue"], "auto",
         "how delay/jitter are made: auto (netem where the kernel has it, else the userspace queue), netem, queue",
         only=Only("lab-delays-with-netem", "--delay-mechanism queue is the single-host delay line; a lab's router "
                   "applies delay with netem on its own interface (use --delay-mechanism auto or netem)",
                   sites=frozenset({"local"}), values=frozenset({"queue"}))),
    Axis("publisher", Literal["virtual", "esp32"], "virtual", "virtual or esp32"),
    Axis("serial_port", str | None, None,
         "esp32: the board's serial port, opened once (e.g. /dev/ttyUSB0, the PTY of board-emu)", only=_BOARD_ONLY,
         host=True),
    Axis("baud", int, 115200, "the board's serial baud rate", ge=300, le=4_000_000, host=True),
    Axis("board_host", str | None, None,
         "esp32: the address of this host's interface the board reaches, never a wildcard such as 0.0.0.0 or :: "
         "(default: the address of its default route)", only=_BOARD_ONLY, host=True),
    Axis("reset_board", bool, False, "esp32: reset the board through DTR/RTS before each cell, as esptool does",
         only=_BOARD_ONLY, host=True),
    Axis("seed", int, 1, "seed of the simulated sensors", ge=0, le=MAX_SEED,
         sweep_help="seed for cell order, sensors and bootstrap (repeat r runs with seed + r - 1)",
         device=Device("seed", run_key=None)),
    Axis("device_id", str, "v1", "the virtual device's id", pattern=r"^[A-Za-z0-9_.-]{1,32}$", scope="run",
         option=None),
    Axis("baseline", str, "plain", "scenario the others are compared with", scope="sweep"),
    Axis("order", Literal["blocked", "random", "as-listed"], "blocked", ORDER_HELP, scope="sweep"),
    Axis("fresh_lab_per_cell", bool, False, FRESH_LAB_HELP, scope="sweep"),
    Axis("connection", Literal["persistent", "reconnect", "resume-id", "resume-ticket"], PERSISTENT,
         CONNECTION_HELP,
         sweep=SweepOption("connections", (PERSISTENT,), "comma list of connection modes: " + CONNECTION_HELP, nest=2),
         cell=lambda v: "" if v == PERSISTENT else v, names=Names(word=str, order=1),
         device=Device("connection", "connection", run_key="mode", when=_not_persistent)),
    Axis("per_connection", int, 1, "readings per connection (K) when the connection is not persistent",
         ge=1, le=1_000_000, device=Device("per_connection", "connection", when=_not_persistent)),
    Axis("close", Literal["disconnect", "drop"], "disconnect",
         "how a connection ends: disconnect (DISCONNECT + close_notify) or drop (as a sensor losing power)",
         device=Device("close", "connection", when=_not_persistent)),
    Axis("sleep_ms", float, 0.0, SLEEP_HELP, ge=0, le=86_400_000, option="sleep", cli_type=str, cli_default="0",
         from_cli=parse_interval,
         only=Only("sleep-is-the-virtual-devices", "--sleep {value} ms is the virtual devices' (vdevice and the "
                   "fleet): a board reconnects one interval after its last reading",
                   publishers=frozenset({"virtual", "fleet"})),
         device=Device("sleep_ms", "connection", run_key=None,
                       when=lambda v: _not_persistent(v) and given("sleep_ms")(v))),
    Axis("power_save", Literal["none", "modem-sleep"], "none", POWER_SAVE_HELP, only=_NOT_THE_FLEET,
         names=Names("protocol", str, 7), device=Device("power_save", "lifecycle", when=given("power_save"))),
    Axis("sleep_mode", Literal["stay", "light", "deep"], "stay", SLEEP_MODE_HELP, only=_NOT_THE_FLEET,
         sweep=SweepOption("sleep_modes", ("stay",), "comma list of sleep modes: " + SLEEP_MODE_HELP, nest=2),
         cell=lambda v: "" if v == "stay" else f"{v}sleep", names=Names(word=lambda v: f"{v} sleep", order=1),
         device=Device("sleep_mode", "lifecycle", when=given("sleep_mode"))),
    Axis("devices", int, 1, DEVICES_HELP, ge=1, le=MAX_DEVICES,
         sweep=SweepOption("devices", (1,), "comma list of fleet sizes (a sweep axis): " + DEVICES_HELP, nest=3,
                     lab=True),  # the broker's open-file limit is the container's
         cell=lambda v: f"{v}dev" if v > 1 else "", names=Names(word=lambda v: f"{v} devices", order=2),
         only=Only("fleet-is-virtual", "--devices N > 1 runs N virtual devices (the fleet): use it with "
                   "--publisher virtual", publishers=frozenset({"virtual", "fleet"})),
         device=Device("devices", "fleet", run_key=None)),
    Axis("device_stack", Literal["mbedtls-2.28", "mbedtls-3.6"], "mbedtls-2.28", DEVICE_STACK_HELP,
         sweep=SweepOption("device_stacks", ("mbedtls-2.28",), "comma list of device TLS stacks: " + DEVICE_STACK_HELP,
                     nest=2),
         cell=lambda v: "" if v == "mbedtls-2.28" else v.replace(".", "").replace("-", ""),
         names=Names("protocol", str, 6),
         only=Only("device-stack-is-virtual", "--device-stack {value} picks the virtual device's image (a board runs "
                   "the stack its firmware was built with): use it with --publisher virtual on this host",
                   publishers=frozenset({"virtual", "fleet"}), sites=frozenset({"local"}))),
    Axis("transport", Literal["tcp", "websocket"], "tcp", TRANSPORT_HELP,
         sweep=SweepOption("transports", ("tcp",), "comma list of MQTT transports: " + TRANSPORT_HELP, nest=2,
                           lab=True),  # its broker listener (and image) is the lab's
         cell=lambda v: "" if v == "tcp" else "ws", names=Names(word=str, order=3),
         only=Only("websocket-client-is-the-virtual-devices", "--transport {value}: the core's WebSocket client "
                   "runs in vdevice and the fleet; the board's firmware does not wire it yet (use --publisher "
                   "virtual)", publishers=frozenset({"virtual", "fleet"})),
         device=Device("mqtt_transport", run_key=None, when=given("transport"))),
    Axis("broker", Literal["auto", "mosquitto", "mosquitto-2.0.21", "rabbitmq"], "auto", BROKER_HELP,
         sweep=SweepOption("brokers", ("auto",), "comma list of brokers: " + BROKER_HELP, nest=2, lab=True),
         cell=lambda v: "" if v == "auto" else v.replace(".", "").replace("-", ""), names=Names(word=str, order=4)),
    Axis("connect_rate", float, 100.0,
         "a fleet's devices started per second (each at a seeded random offset in its first interval)",
         ge=0.01, le=10_000, device=Device("connect_rate", "fleet", run_key=None)),
    Axis("inventory", str | None, None, "run across the hosts of this Ansible inventory: broker, publisher and "
         "router hosts reached over SSH (docs/multi-host.md)", cli_type=Path | None, from_cli=_absolute, host=True,
         only=Only("lab-runs-virtual", "--inventory runs the virtual device on a publisher host of the lab: use "
                   "it with --publisher virtual", publishers=frozenset({"virtual", "fleet"}))),
))
