"""The serial control protocol of a real board (ESP32) or of board-emu: pure code, no serial I/O.

The Python mirror of firmware/platformio/lib/testbed_core/src/board_protocol.h, which DEFINES the
protocol; tests/firmware/test_board_protocol_mirror.py reads that header and checks every constant
here against it. The RUN body's keys are not written here: they are the board's entries of
device_options.def, read by protocol_def.py. firmware/platformio/README.md ("Serial control protocol")
explains the lines.

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

from orchestrator.errors import TestbedError
from orchestrator.publishers.board import protocol_def

VERSION = 4  # 2: the host's STOP mid-run; 3: the MQTT version, session and in-flight RUN keys; 4: power_save,
# sleep_mode
# The RUN keys each version was released with (protocol_def.fingerprint of the board's entries of device_options.def:
# names, kinds, ranges, choices, defaults). A change of those keys is a new version: tests/firmware/
# test_board_protocol_mirror.py fails until VERSION (and board_protocol.h kVersion) is bumped and its keys pinned here.
RUN_KEYS_OF_VERSION = {3: "70de5ed6cd9d", 4: "6e1974289eee"}

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

# The keys a RUN body must carry (board_protocol.h kRequiredKeys); with transport=tls also ca and ciphers.
REQUIRED_KEYS = ("id", "host", "port", "transport", "payload", "samples", "interval_us", "qos")


def run_keys() -> tuple[str, ...]:
    """The RUN body's keys, in the order a body carries them: the board's entries of device_options.def."""
    return protocol_def.board_keys()

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


RunValue = str | int | float | bool | tuple[str, ...] | None


def _written(value: RunValue) -> str | None:
    """A value as the body carries it; None: the key is left out (None, False, an empty tuple)."""
    if value is None or value is False or value == ():
        return None
    if value is True:
        return "1"
    return ",".join(value) if isinstance(value, tuple) else str(value)


@dataclass(frozen=True, init=False)
class RunCell:
    """One cell's parameters as a RUN carries them to the board: its keys by their .def names (``run_keys()``:
    ``ca``, ``cert`` and ``key`` are the PEMs, ``ciphers`` a tuple of IANA names, ``keylog`` a bool), None or
    absent: the board's default. ``extra``: keys of axes (orchestrator/model/axes.py) that are not RUN keys,
    written after them."""

    items: tuple[tuple[str, RunValue], ...]
    extra: tuple[tuple[str, str], ...]

    def __init__(self, *, extra: tuple[tuple[str, str], ...] = (), **keys: RunValue) -> None:
        unknown = sorted(set(keys) - set(run_keys()))
        if unknown:
            raise BoardProtocolError(f"{', '.join(unknown)}: not a RUN key of protocol version {VERSION} "
                                     "(the board's entries of device_options.def)")
        for k in REQUIRED_KEYS:  # a key the body must carry: the .def's default unless the cell gives it
            if keys.get(k) is None:
                keys[k] = protocol_def.board_defaults()[k]
                if keys[k] is None:
                    raise BoardProtocolError(f"a RUN needs {k} (device_options.def has no default for it)")
        object.__setattr__(self, "items", tuple((k, keys[k]) for k in run_keys() if k in keys))
        object.__setattr__(self, "extra", tuple(extra))
        if not _RUN_ID.fullmatch(str(self.id)):
            raise BoardProtocolError(f"run id {self.id!r}: 1..{MAX_RUN_ID} characters of [A-Za-z0-9_.-]")
        if self.get("transport") == "tls" and (self.get("ca") is None or not self.get("ciphers")):
            raise BoardProtocolError("a TLS run needs ca and ciphers")
        if (self.get("sync_host") is None) != (self.get("sync_port") is None):
            raise BoardProtocolError("sync_host and sync_port go together")

    def get(self, key: str) -> RunValue:
        return dict(self.items).get(key)

    def __getattr__(self, key: str) -> RunValue:
        """A RUN key as an attribute (cell.username); None when the cell leaves it out."""
        if key in run_keys():
            return self.get(key)
        raise AttributeError(f"{type(self).__name__} has no attribute or RUN key {key!r}")

    @property
    def id(self) -> str:
        return str(self.get("id"))

    def replace(self, **keys: RunValue) -> RunCell:
        """This cell with some keys changed (None: left out)."""
        return RunCell(extra=self.extra, **{**dict(self.items), **keys})

    def fields(self) -> list[tuple[str, str]]:
        """(key, value) in run_keys() order, then the extra keys; absent options are left out."""
        written = ((k, _written(v)) for k, v in self.items)
        return [(k, v) for k, v in written if v is not None] + list(self.extra)


def axis_keys(options: dict[str, object]) -> tuple[dict[str, object], tuple[tuple[str, str], ...]]:
    """The axes' RUN options (orchestrator/model/axes.py run_options) as RunCell's own keys, and the rest
    as its extra keys (None: left out)."""
    own = {k: v for k, v in options.items() if k in run_keys()}
    return own, tuple((k, str(v)) for k, v in options.items() if k not in run_keys() and v is not None)


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
