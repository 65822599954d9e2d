"""What one run is asked to do (RunSpec), validated before anything starts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.model.impairment import DelayMechanism

MAX_PAYLOAD = 4096  # the firmware core's fixed buffer (payload.h kMaxPayload)
TIMESTAMP_DIGITS = 16
DEVICE_ID = "v1"
FLEET_PREFIX = "f"  # a fleet's devices are f0000, f0001, ... (the fleet binary's ids: prefix + 4 digits)
MAX_DEVICES = 5000  # the fleet binary's kMaxDevices

QoS = Literal[0, 1]
Publisher = Literal["virtual", "esp32"]
# How the publisher's connection lives (issue 13): one for the run; or connect, publish K readings, end
# it, sleep until the next reading (every TLS handshake full, or resumed by session ID or by ticket).
Connection = Literal["persistent", "reconnect", "resume-id", "resume-ticket"]
CONNECTIONS: tuple[str, ...] = ("persistent", "reconnect", "resume-id", "resume-ticket")
Close = Literal["disconnect", "drop"]  # DISCONNECT + close_notify, or the link just dropped (power lost)


def effective_connection(connection: str, tls: bool) -> tuple[str, str | None]:
    """The mode a run uses, and why it differs from the one asked: plain MQTT has nothing to resume."""
    if not tls and connection.startswith("resume-"):
        return "reconnect", f"{connection} on plain MQTT runs as reconnect: there is no TLS session to resume"
    return connection, None


def payload_min_size(samples: int, device_id: str = DEVICE_ID) -> int:
    """Smallest payload that fits every message of a run (mirrors the firmware core's rule:
    worst-case widths: digits of samples-1, a 16-digit timestamp, 4-digit readings)."""
    seq_digits = len(str(max(samples - 1, 0)))
    worst = ('{"d":"' + device_id + '","n":' + "9" * seq_digits + ',"t":' + "9" * TIMESTAMP_DIGITS
             + ',"s":[1,4095,4095,9999]}')
    return len(worst)


def fleet_device_id(index: int) -> str:
    return f"{FLEET_PREFIX}{index:04d}"


def check_fleet_options(devices: int, publisher: str) -> None:
    if devices > 1 and publisher != "virtual":
        raise ValueError("--devices N > 1 runs N virtual devices (the fleet): use it with --publisher virtual")


def check_fleet_connection(devices: int, connection: str) -> None:
    if devices > 1 and connection != "persistent":
        raise ValueError(f"--devices N > 1 keeps one persistent connection per device; --connection {connection} "
                         "is for one device (the fleet measures connection set-up at its connect rate)")


def check_board_options(publisher: str, serial_port: str | None, board_host: str | None,
                        reset_board: bool = False) -> None:
    if publisher == "esp32" and not serial_port:
        raise ValueError("--publisher esp32 needs --serial-port (e.g. /dev/ttyUSB0, or the PTY of "
                         "`testbed board emulate`)")
    if publisher != "esp32" and (serial_port or board_host or reset_board):
        raise ValueError("--serial-port, --board-host and --reset-board are for --publisher esp32")


def check_lab_options(inventory: str | None, publisher: str) -> None:
    if inventory is not None and publisher != "virtual":
        raise ValueError("--inventory runs the virtual device on a publisher host of the lab: use it with "
                         "--publisher virtual")


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenario: str
    payload: int = Field(default=65, ge=1, le=MAX_PAYLOAD, description="application payload bytes (exact)")
    samples: int = Field(default=200, ge=1, le=1_000_000)
    interval_ms: float = Field(default=250.0, gt=0, le=3_600_000)
    qos: QoS = 0
    impairment: str = "none"
    delay_mechanism: DelayMechanism = "auto"  # absent in specs recorded before it existed: auto
    publisher: Publisher = "virtual"
    serial_port: str | None = None  # esp32: the board's serial port (a device, or a pyserial URL)
    baud: int = Field(default=115200, ge=300, le=4_000_000)
    board_host: str | None = None  # esp32: the lab host's address the board reaches (default: its LAN address)
    reset_board: bool = False  # esp32: reset the board (DTR/RTS) before each cell
    seed: int = 1
    device_id: str = Field(default=DEVICE_ID, pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    connection: Connection = "persistent"  # absent in specs recorded before it existed: persistent
    per_connection: int = Field(default=1, ge=1, le=1_000_000)  # readings per connection (not persistent)
    close: Close = "disconnect"
    # a fleet (issue 14): N virtual devices, each with its own id, seq and send log, started at connect_rate/s
    devices: int = Field(default=1, ge=1, le=MAX_DEVICES)
    connect_rate: float = Field(default=100.0, gt=0, le=10_000)
    # a lab across hosts (docs/multi-host.md): the Ansible inventory with broker, router and publisher hosts
    inventory: str | None = None

    @property
    def is_fleet(self) -> bool:
        return self.devices > 1

    @property
    def id_for_payload(self) -> str:
        """The longest device id the payload must hold."""
        return fleet_device_id(self.devices - 1) if self.is_fleet else self.device_id

    @property
    def connections_expected(self) -> int:
        return 1 if self.connection == "persistent" else -(-self.samples // self.per_connection)

    @model_validator(mode="after")
    def _payload_fits(self) -> RunSpec:
        minimum = payload_min_size(self.samples, self.id_for_payload)
        if self.payload < minimum:
            raise ValueError(f"payload {self.payload} B is below the minimum of {minimum} B for {self.samples} "
                             f"samples (device id {self.id_for_payload!r}): the sample JSON needs {minimum} B")
        return self

    @model_validator(mode="after")
    def _board_port(self) -> RunSpec:
        check_board_options(self.publisher, self.serial_port, self.board_host, self.reset_board)
        check_fleet_options(self.devices, self.publisher)
        check_fleet_connection(self.devices, self.connection)
        check_lab_options(self.inventory, self.publisher)
        return self

    @property
    def messages_expected(self) -> int:
        """Every device publishes ``samples`` readings."""
        return self.devices * self.samples

    @property
    def expected_duration_s(self) -> float:
        """The schedule: a fleet's last device starts (devices - 1) / connect_rate seconds after the first."""
        start = (self.devices - 1) / self.connect_rate if self.is_fleet else 0.0
        return start + self.samples * self.interval_ms / 1000.0

    def timeout_s(self) -> float:
        """How long to wait for the last message: the schedule plus a margin for start-up and slow links."""
        return self.expected_duration_s * 1.5 + 30.0


def parse_interval(text: str) -> float:
    """'250ms', '0.5s', '250' (ms) -> milliseconds."""
    t = text.strip().lower()
    try:
        if t.endswith("ms"):
            return float(t[:-2])
        if t.endswith("s"):
            return float(t[:-1]) * 1000.0
        return float(t)
    except ValueError as exc:
        raise ValueError(f"invalid interval {text!r}: use e.g. 250ms or 0.5s") from exc
