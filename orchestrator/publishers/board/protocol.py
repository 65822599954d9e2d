"""The serial control protocol of a real board (ESP32) or of board-emu: pure code, no serial I/O.

The Python mirror of firmware/platformio/lib/testbed_core/src/board_protocol.h, which DEFINES the
protocol; tests/firmware/test_board_protocol_mirror.py reads that header and checks every constant
here against it. firmware/platformio/README.md ("Serial control protocol") explains the lines.

A RUN travels as: ``RUN BEGIN len=N crc=XXXXXXXX``, then ``RUN CHUNK i=K <base64>`` lines (each
ACKed before the next is sent, each small enough for the board's serial receive buffer), then
``RUN END``. The body is ``key=value`` lines; in a value ``\\`` is ``\\\\``, a newline ``\\n``, a CR ``\\r``.
Board lines are parsed into the dataclasses of :mod:`orchestrator.publishers.board.lines`.
"""

from __future__ import annotations

import base64
import re
import zlib
from dataclasses import dataclass
from typing import Literal

from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES

VERSION = 3  # 2: the host's STOP mid-run; 3: the MQTT version, session and in-flight RUN keys

# Board -> host: the first word of every line.
LINE_BANNER = "BANNER"
LINE_READY = "READY"
LINE_ACK = "ACK"
LINE_ERROR = "ERROR"
LINE_CLOCK = "CLOCK"
LINE_SYNC = "SYNC"
LINE_KEYLOG = "KEYLOG"
LINE_HANDSHAKE = "HANDSHAKE"
LINE_MSG = "MSG"
LINE_DONE = "DONE"
LINE_CONN = "CONN"  # after each connection of a run that is not persistent

# Host -> board.
CMD_HELLO = "HELLO"
CMD_RUN = "RUN"
RUN_BEGIN = "BEGIN"
RUN_CHUNK = "CHUNK"
RUN_END = "END"
RUN_ABORT = "ABORT"
CMD_STOP = "STOP"  # mid-run: the board stops before its next message (ERROR Interrupted, then READY)

# What an ACK acknowledges.
ACK_BEGIN = "begin"
ACK_CHUNK = "chunk"
ACK_RUN = "run"
ACK_ABORT = "abort"

MAX_BODY = 8192
MAX_HOST_LINE = 320
MAX_CHUNK_BYTES = 192
CHUNK_LINE_OVERHEAD = 24
TRANSFER_TIMEOUT_MS = 10000
MAX_RUN_ID = 63
MAX_SYNC_COUNT = 64
DEFAULT_SYNC_COUNT = 8
MODE_PERSISTENT = "persistent"
MODE_RECONNECT = "reconnect"
MODE_RESUME_ID = "resume-id"
MODE_RESUME_TICKET = "resume-ticket"
CLOSE_DISCONNECT = "disconnect"
CLOSE_DROP = "drop"
MAX_PER_CONNECTION = 1000000  # the per_connection axis (orchestrator/model/axes.py) and device_options.def

RUN_KEYS = (
    "id", "host", "port", "transport", "ciphers", "ca", "cert", "key", "server_name", "username", "password",
    "payload", "samples", "interval_us", "qos", "device_id", "topic", "client_id", "keylog", "connect_timeout_ms",
    "sync_host", "sync_port", "sync_count", "mode", "per_connection", "close",
    "mqtt", "session", "session_expiry_s", "topic_alias", "inflight", "ack_timeout_ms",
)

# The tb::Err names the board answers a RUN transfer or body with (all are in tb_error.cpp).
PROTOCOL_ERRORS = frozenset({
    "UnknownCommand", "LineTooLong", "OutOfSequence", "BodyTooLarge", "ChunkMissing", "ChunkDuplicate",
    "LengthMismatch", "CrcMismatch", "BadEncoding", "UnknownKey", "MissingKey", "DuplicateKey", "UnsupportedMode",
    "TransferTimeout", "InvalidArgument",
})

REFLASH = "testbed firmware build && testbed firmware upload"
_RUN_ID = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_RUN_ID}}}")


class BoardProtocolError(TestbedError):
    """The board and the host do not understand each other."""


class VersionMismatch(BoardProtocolError):
    def __init__(self, board_version: int, where: str) -> None:
        super().__init__(
            f"the board on {where} speaks serial protocol version {board_version}, this testbed speaks "
            f"version {VERSION}",
            hint=f"flash the firmware of this testbed: {REFLASH}")
        self.board_version = board_version


def chunk_bytes_for(rx_buf: int) -> int:
    """Body bytes per chunk for a board with an rx_buf-byte receive buffer (the whole line fits it)."""
    if rx_buf <= CHUNK_LINE_OVERHEAD + 4:
        return 0
    return min(MAX_CHUNK_BYTES, (rx_buf - CHUNK_LINE_OVERHEAD) // 4 * 3)


def escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


@dataclass(frozen=True)
class RunCell:
    """One cell's parameters as a RUN carries them to the board."""

    id: str
    host: str
    port: int
    transport: Literal["plain", "tls"]
    payload: int
    samples: int
    interval_us: int
    qos: int = AXES["qos"].default
    ciphers: tuple[str, ...] = ()  # IANA names, e.g. TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
    ca_pem: str | None = None
    cert_pem: str | None = None
    key_pem: str | None = None
    server_name: str | None = None
    username: str | None = None
    password: str | None = None
    device_id: str | None = None
    topic: str | None = None
    client_id: str | None = None
    keylog: bool = False
    connect_timeout_ms: int | None = None
    sync_host: str | None = None
    sync_port: int | None = None
    sync_count: int | None = None
    mode: str | None = None  # None: the board's default, persistent
    per_connection: int | None = None  # readings per connection (not persistent); None: 1
    close: str | None = None  # disconnect (None: the default) or drop
    # version 3 (None: the board's default): MQTT 3.1.1|5, clean|persistent session, its MQTT 5 expiry, topic alias
    # off|on, QoS 1/2 messages in flight at most, the wait for an acknowledgement
    mqtt: str | None = None
    session: str | None = None
    session_expiry_s: int | None = None
    topic_alias: str | None = None
    inflight: int | None = None
    ack_timeout_ms: int | None = None
    # keys of axes (orchestrator/model/axes.py) that are not among RUN_KEYS, after them: (key, value)
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not _RUN_ID.fullmatch(self.id):
            raise BoardProtocolError(f"run id {self.id!r}: 1..{MAX_RUN_ID} characters of [A-Za-z0-9_.-]")
        if self.transport == "tls" and (self.ca_pem is None or not self.ciphers):
            raise BoardProtocolError("a TLS run needs ca_pem and ciphers")
        if (self.sync_host is None) != (self.sync_port is None):
            raise BoardProtocolError("sync_host and sync_port go together")

    def fields(self) -> list[tuple[str, str]]:
        """(key, value) in RUN_KEYS order, then the extra keys; absent options are left out."""
        values: dict[str, object] = {
            "id": self.id, "host": self.host, "port": self.port, "transport": self.transport,
            "ciphers": ",".join(self.ciphers) if self.ciphers else None, "ca": self.ca_pem, "cert": self.cert_pem,
            "key": self.key_pem, "server_name": self.server_name, "username": self.username,
            "password": self.password, "payload": self.payload, "samples": self.samples,
            "interval_us": self.interval_us, "qos": self.qos, "device_id": self.device_id, "topic": self.topic,
            "client_id": self.client_id, "keylog": 1 if self.keylog else None,
            "connect_timeout_ms": self.connect_timeout_ms, "sync_host": self.sync_host,
            "sync_port": self.sync_port, "sync_count": self.sync_count, "mode": self.mode,
            "per_connection": self.per_connection, "close": self.close, "mqtt": self.mqtt, "session": self.session,
            "session_expiry_s": self.session_expiry_s, "topic_alias": self.topic_alias, "inflight": self.inflight,
            "ack_timeout_ms": self.ack_timeout_ms,
        }
        return [(k, str(values[k])) for k in RUN_KEYS if values[k] is not None] + list(self.extra)


def axis_keys(options: dict[str, object]) -> tuple[dict[str, object], tuple[tuple[str, str], ...]]:
    """The axes' RUN options (orchestrator/model/axes.py run_options) as RunCell's own fields, and the rest
    as its extra keys (None: left out)."""
    own = {k: v for k, v in options.items() if k in RUN_KEYS}
    return own, tuple((k, str(v)) for k, v in options.items() if k not in RUN_KEYS and v is not None)


def encode_body(cell: RunCell) -> bytes:
    body = "".join(f"{k}={escape_value(v)}\n" for k, v in cell.fields()).encode("utf-8")
    if len(body) > MAX_BODY:
        raise BoardProtocolError(f"RUN body of {len(body)} bytes is larger than the board's {MAX_BODY}")
    return body


@dataclass(frozen=True)
class RunFrames:
    """The host lines of one RUN (without their newlines)."""

    begin: str
    chunks: tuple[str, ...]
    end: str
    body: bytes


def frame_body(body: bytes, rx_buf: int) -> RunFrames:
    """BEGIN with length and CRC-32, chunks sized for the board's receive buffer, END."""
    size = chunk_bytes_for(rx_buf)
    if size == 0:
        raise BoardProtocolError(f"the board's serial receive buffer of {rx_buf} bytes cannot hold one chunk line")
    chunks = tuple(
        f"{CMD_RUN} {RUN_CHUNK} i={i} {base64.b64encode(body[off:off + size]).decode('ascii')}"
        for i, off in enumerate(range(0, len(body), size)))
    begin = f"{CMD_RUN} {RUN_BEGIN} len={len(body)} crc={zlib.crc32(body):08x}"
    return RunFrames(begin, chunks, f"{CMD_RUN} {RUN_END}", body)


def encode_run(cell: RunCell, rx_buf: int) -> RunFrames:
    return frame_body(encode_body(cell), rx_buf)
