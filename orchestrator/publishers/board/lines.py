"""Every line a board prints, parsed into a typed object (pure code).

A line whose first word is a protocol line name (orchestrator.publishers.board.protocol) must have
its fields, else :class:`MalformedLine`; any other line (WIFI, SNTP, MQ2, the ESP32 ROM's boot
noise) becomes :class:`Other`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.publishers.board import protocol as p


class MalformedLine(p.BoardProtocolError):
    def __init__(self, line: str, why: str) -> None:
        super().__init__(f"malformed board line ({why}): {line[:200]!r}")
        self.line = line


@dataclass(frozen=True)
class Banner:
    proto: int
    board: str
    chip: str
    mac: str
    fw: str
    arduino: str
    idf: str
    mbedtls: str
    cpu_mhz: int
    wifi_ps: str
    hw_crypto: tuple[str, ...]
    sw_crypto: tuple[str, ...]
    rx_buf: int
    device: str
    extra: dict[str, str] = field(default_factory=dict)  # fields a newer board adds


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class Ack:
    what: str  # begin, chunk, run, abort
    index: int | None = None  # chunk
    run_id: str | None = None  # run


@dataclass(frozen=True)
class BoardError:
    name: str  # a tb::Err name, e.g. CrcMismatch, ConnectRefused
    message: str


@dataclass(frozen=True)
class ClockSample:
    phase: str  # pre, post
    i: int
    t1_us: int
    t2_us: int
    t3_us: int
    t4_us: int


@dataclass(frozen=True)
class Sync:
    phase: str
    count: int
    got: int
    status: str


@dataclass(frozen=True)
class Keylog:
    line: str  # an NSS key log line, "CLIENT_RANDOM <hex> <hex>"


# The device's own TLS handshake phases, optional fields of HANDSHAKE and CONN (ms on the board's clock, "-" where not
# reached; firmware's HandshakePhases): the line's key -> the connections log's column (records.py).
PHASES = {"hello_ms": "hello_sent_ms", "flight_ms": "flight_in_ms", "verified_ms": "verified_ms",
          "kex_ms": "kex_done_ms", "finished_ms": "finished_sent_ms", "busy_ms": "device_busy_ms"}


@dataclass(frozen=True)
class Handshake:
    tcp_ms: float | None
    tls_ms: float | None
    connack_ms: float | None
    version: str | None
    suite: str | None
    min_heap: int
    heap_before: int
    phases: dict[str, float | None] | None = None  # PHASES' columns; None from a board that prints none


@dataclass(frozen=True)
class Msg:
    seq: int
    t_send_us: int
    bytes: int
    mqtt: int
    heap: int
    rssi: int
    # QoS 1/2: the time to PUBACK / PUBCOMP on the board's monotonic clock (the first PUBLISH handed to the
    # transport -> its PUBACK / PUBCOMP read, resends included); None at QoS 0 or when none came
    puback_us: int | None = None


@dataclass(frozen=True)
class Conn:
    """One connection of a run that is not persistent, after it ended (its index from 0)."""

    index: int
    tcp_ms: float | None
    tls_ms: float | None
    connack_ms: float | None
    resumed: bool | None  # the board's claim: the session's master secret is the one it offered
    msgs: int
    close: str
    phases: dict[str, float | None] | None = None  # as Handshake's


@dataclass(frozen=True)
class Done:
    sent: int
    run_id: str
    # a persistent session's (protocol version 3): connections opened again after a loss, PUBLISH/PUBREL sent again
    # with DUP, in-flight messages given up; None for a clean session's run
    reconnects: int | None = None
    resent: int | None = None
    lost: int | None = None


@dataclass(frozen=True)
class Other:
    text: str


BoardLine = Banner | Ready | Ack | BoardError | ClockSample | Sync | Keylog | Handshake | Msg | Conn | Done | Other

_BANNER_KEYS = ("proto", "board", "chip", "mac", "fw", "arduino", "idf", "mbedtls", "cpu_mhz", "wifi_ps",
                "hw_crypto", "sw_crypto", "rx_buf", "device")


def _fields(line: str, rest: str, required: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in rest.split():
        key, sep, value = word.partition("=")
        if not sep:
            raise MalformedLine(line, f"{word!r} is not key=value")
        out[key] = value
    missing = [k for k in required if k not in out]
    if missing:
        raise MalformedLine(line, f"{', '.join(missing)} missing")
    return out


def _int(line: str, f: dict[str, str], key: str) -> int:
    try:
        return int(f[key])
    except ValueError:
        raise MalformedLine(line, f"{key}={f[key]!r} is not an integer") from None


def _ms(line: str, f: dict[str, str], key: str) -> float | None:
    if f[key] == "-":
        return None
    try:
        return float(f[key])
    except ValueError:
        raise MalformedLine(line, f"{key}={f[key]!r} is not a number of ms") from None


def _dash(value: str) -> str | None:
    return None if value == "-" else value


def _banner(line: str, rest: str) -> Banner:
    f = _fields(line, rest, _BANNER_KEYS)
    crypto = {k: tuple(x for x in f[k].split(",") if x and x != "-") for k in ("hw_crypto", "sw_crypto")}
    return Banner(_int(line, f, "proto"), f["board"], f["chip"], f["mac"], f["fw"], f["arduino"], f["idf"],
                  f["mbedtls"], _int(line, f, "cpu_mhz"), f["wifi_ps"], crypto["hw_crypto"], crypto["sw_crypto"],
                  _int(line, f, "rx_buf"), f["device"], {k: v for k, v in f.items() if k not in _BANNER_KEYS})


def _ack(line: str, rest: str) -> Ack:
    what, _, tail = rest.partition(" ")
    if what == p.ACK_CHUNK:
        return Ack(what, index=_int(line, _fields(line, tail, ("i",)), "i"))
    if what == p.ACK_RUN:
        return Ack(what, run_id=_fields(line, tail, ("id",))["id"])
    if what in (p.ACK_BEGIN, p.ACK_ABORT):
        return Ack(what)
    raise MalformedLine(line, f"unknown ACK {what!r}")


def _error(line: str, rest: str) -> BoardError:
    name, sep, message = rest.partition(": ")
    if not sep or not name.isidentifier():
        raise MalformedLine(line, "expected ERROR <Name>: <message>")
    return BoardError(name, message)


def _clock(line: str, rest: str) -> ClockSample:
    f = _fields(line, rest, ("phase", "i", "t1", "t2", "t3", "t4"))
    return ClockSample(f["phase"], *(_int(line, f, k) for k in ("i", "t1", "t2", "t3", "t4")))


def _sync(line: str, rest: str) -> Sync:
    f = _fields(line, rest, ("phase", "count", "got", "status"))
    return Sync(f["phase"], _int(line, f, "count"), _int(line, f, "got"), f["status"])


def _phases(line: str, f: dict[str, str]) -> dict[str, float | None] | None:
    """The optional phase fields (PHASES) by their column names; None when the line has none of them."""
    if not any(k in f for k in PHASES):
        return None
    return {col: _ms(line, f, key) if key in f else None for key, col in PHASES.items()}


def _handshake(line: str, rest: str) -> Handshake:
    f = _fields(line, rest, ("tcp_ms", "tls_ms", "connack_ms", "version", "suite", "min_heap", "heap_before"))
    return Handshake(_ms(line, f, "tcp_ms"), _ms(line, f, "tls_ms"), _ms(line, f, "connack_ms"),
                     _dash(f["version"]), _dash(f["suite"]), _int(line, f, "min_heap"), _int(line, f, "heap_before"),
                     _phases(line, f))


def _msg(line: str, rest: str) -> Msg:
    f = _fields(line, rest, ("seq", "t_send_us", "bytes", "mqtt", "heap", "rssi"))
    puback = _int(line, f, "puback_us") if "puback_us" in f else None  # optional; other extra fields are ignored
    seq, t_send, size, mqtt, heap, rssi = (_int(line, f, k) for k in ("seq", "t_send_us", "bytes", "mqtt", "heap",
                                                                      "rssi"))
    return Msg(seq, t_send, size, mqtt, heap, rssi, puback)


def _conn(line: str, rest: str) -> Conn:
    f = _fields(line, rest, ("i", "tcp_ms", "tls_ms", "connack_ms", "resumed", "msgs", "close"))
    resumed = None if f["resumed"] == "-" else f["resumed"] == "1"
    return Conn(_int(line, f, "i"), _ms(line, f, "tcp_ms"), _ms(line, f, "tls_ms"), _ms(line, f, "connack_ms"),
                resumed, _int(line, f, "msgs"), f["close"], _phases(line, f))


def _done(line: str, rest: str) -> Done:
    f = _fields(line, rest, ("sent", "id"))
    session = [_int(line, f, k) if k in f else None for k in ("reconnects", "resent", "lost")]
    return Done(_int(line, f, "sent"), f["id"], *session)


_PARSERS: dict[str, Callable[[str, str], BoardLine]] = {
    p.LINE_BANNER: _banner, p.LINE_ACK: _ack, p.LINE_ERROR: _error, p.LINE_CLOCK: _clock, p.LINE_SYNC: _sync,
    p.LINE_HANDSHAKE: _handshake, p.LINE_MSG: _msg, p.LINE_CONN: _conn, p.LINE_DONE: _done,
}


def parse_line(text: str) -> BoardLine:
    """One board line (without its newline; a trailing CR is ignored)."""
    line = text.rstrip("\r")
    word, _, rest = line.partition(" ")
    if word == p.LINE_READY and not rest:
        return Ready()
    if word == p.LINE_KEYLOG and rest:
        return Keylog(rest)
    parser = _PARSERS.get(word)
    return parser(line, rest) if parser is not None else Other(line)
