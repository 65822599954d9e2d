"""The serial control protocol is defined once per language: board_protocol.h (C++) and
orchestrator/publishers/board/protocol.py (Python). These tests read the header and check that the
Python constants agree, so the two cannot silently fork; plus the pure Python encoder and parser."""

from __future__ import annotations

import base64
import re
import zlib
from pathlib import Path

import pytest
from device_options_def import DEF, board_keys, read_def
from fwtest_support import REPO

from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import protocol_def
from orchestrator.publishers.board.lines import (
    Ack,
    Banner,
    BoardError,
    ClockSample,
    Done,
    Handshake,
    Keylog,
    MalformedLine,
    Msg,
    Other,
    Ready,
    Sync,
    parse_line,
)

CORE = REPO / "firmware" / "platformio" / "lib" / "testbed_core" / "src"
HEADER = (CORE / "board_protocol.h").read_text()


def _cpp_strings(prefix: str) -> dict[str, str]:
    """constexpr char k<prefix><Name>[] = "value"; -> {Name: value}"""
    return dict(re.findall(rf'constexpr char k{prefix}(\w+)\[\] = "([^"]*)";', HEADER))


# Limits of RUN keys the header takes from the option table (device_options.def): {constant: (key, field)}.
_FROM_TABLE = {"kMaxPerConnection": ("per_connection", "max"), "kMaxSyncCount": ("sync_count", "max"),
               "kDefaultSyncCount": ("sync_count", "def")}


def _cpp_number(name: str) -> int:
    if name in _FROM_TABLE:
        key, field = _FROM_TABLE[name]
        assert re.search(rf"constexpr uint32_t {name} = static_cast<uint32_t>\(opt::spec\(opt::Id::{key}\)\.{field}\);",
                         HEADER), f"{name} not taken from device_options.def in board_protocol.h"
        entry = next(o for o in read_def() if o.name == key)
        value = entry.max if field == "max" else entry.default
        assert isinstance(value, int)
        return value
    m = re.search(rf"constexpr (?:uint32_t|size_t) {name} = (\d+);", HEADER)
    assert m, f"{name} not found in board_protocol.h"
    return int(m.group(1))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


@pytest.mark.parametrize("prefix,py", [("Line", "LINE_"), ("Cmd", "CMD_"), ("Run", "RUN_"), ("Ack", "ACK_"),
                                       ("Mode", "MODE_"), ("Close", "CLOSE_")])
def test_names_agree(prefix: str, py: str) -> None:
    cpp = _cpp_strings(prefix)
    assert cpp, f"no k{prefix}* constants in board_protocol.h"
    python = {k[len(py):]: v for k, v in vars(p).items() if k.startswith(py) and isinstance(v, str)}
    assert {_snake(k): v for k, v in cpp.items()} == python


@pytest.mark.parametrize("cpp,py", [("kVersion", "VERSION"), ("kMaxBody", "MAX_BODY"),
                                    ("kMaxPerConnection", "MAX_PER_CONNECTION"),
                                    ("kMaxHostLine", "MAX_HOST_LINE"), ("kMaxChunkBytes", "MAX_CHUNK_BYTES"),
                                    ("kChunkLineOverhead", "CHUNK_LINE_OVERHEAD"),
                                    ("kTransferTimeoutMs", "TRANSFER_TIMEOUT_MS"), ("kMaxRunId", "MAX_RUN_ID"),
                                    ("kMaxSyncCount", "MAX_SYNC_COUNT"), ("kDefaultSyncCount", "DEFAULT_SYNC_COUNT")])
def test_numbers_agree(cpp: str, py: str) -> None:
    assert _cpp_number(cpp) == getattr(p, py)


def test_run_keys_agree() -> None:
    """The board's keys are the option table's entries it takes (board_run_body.cpp looks keys up there), and the
    Python side's are read from the same table (protocol_def.py), none written by hand."""
    assert "TB_BOARD" in (CORE / "board_run_body.cpp").read_text()
    assert board_keys() == p.run_keys()
    assert "RUN_KEYS" not in vars(p)
    required = re.search(r"constexpr opt::Id kRequiredKeys\[\] = \{([^}]*)\};", HEADER)
    assert required, "kRequiredKeys not found in board_protocol.h"
    assert tuple(re.findall(r"opt::Id::(\w+)", required.group(1))) == p.REQUIRED_KEYS


def _def_with(tmp_path: Path, line: str) -> Path:
    copy = tmp_path / "device_options.def"
    copy.write_text(DEF.read_text() + line)
    return copy


def test_a_change_of_the_run_keys_needs_a_version_bump(tmp_path: Path) -> None:
    """VERSION is pinned with the fingerprint of the keys it was released with: a key added, removed, renamed, or
    given another range, choice or default fails here until VERSION (and kVersion) is bumped and the keys pinned."""
    now = protocol_def.fingerprint(protocol_def.board_options())
    assert p.RUN_KEYS_OF_VERSION.get(p.VERSION) == now, (
        f"the board's RUN keys (device_options.def) changed since protocol version {p.VERSION} ({now}): bump VERSION "
        "in protocol.py and kVersion in board_protocol.h, and pin the new keys in RUN_KEYS_OF_VERSION")
    assert len(set(p.RUN_KEYS_OF_VERSION.values())) == len(p.RUN_KEYS_OF_VERSION)  # each version its own keys
    # what the pin catches: a new board key, another default, a key the board no longer takes
    for line in ("TB_OPT_UINT(throwaway_knob, 1, 9, 3)\n",
                 "#undef TB_PROGRAMS\n#define TB_PROGRAMS TB_BOARD\nTB_OPT_TEXT(colour, \"\")\n"):
        assert protocol_def.fingerprint(protocol_def.board_options(_def_with(tmp_path, line))) != now
    changed = DEF.read_text().replace("TB_OPT_UINT(inflight, 1, 256, 1)", "TB_OPT_UINT(inflight, 1, 256, 2)")
    assert changed != DEF.read_text()
    (tmp_path / "changed.def").write_text(changed)
    assert protocol_def.fingerprint(protocol_def.board_options(tmp_path / "changed.def")) != now
    vdevice_only = DEF.read_text() + "#undef TB_PROGRAMS\n#define TB_PROGRAMS TB_VDEVICE\nTB_OPT_TEXT(colour, \"\")\n"
    (tmp_path / "vdevice.def").write_text(vdevice_only)
    assert protocol_def.fingerprint(protocol_def.board_options(tmp_path / "vdevice.def")) == now  # not a RUN key


def test_protocol_error_names_exist_in_the_core() -> None:
    names = set(re.findall(r'case Err::(\w+): return "\1";', (CORE / "tb_error.cpp").read_text()))
    assert p.PROTOCOL_ERRORS <= names


def test_chunk_size_matches_the_header_formula() -> None:
    assert p.chunk_bytes_for(256) == 174 and p.chunk_bytes_for(4096) == p.MAX_CHUNK_BYTES
    for rx in range(40, 1025):
        assert len("RUN CHUNK i=65535 ") + -(-p.chunk_bytes_for(rx) // 3) * 4 + 1 <= min(rx, p.MAX_HOST_LINE)


def test_encode_run_frames_the_escaped_body() -> None:
    cell = p.RunCell(id="c1", host="h", port=8883, transport="tls", payload=65, samples=2, interval_us=0,
                     ciphers=("A", "B"), ca="-----BEGIN X-----\r\nab\\c\n", keylog=True)
    body = p.encode_body(cell)
    assert body == (b"id=c1\nhost=h\nport=8883\ntransport=tls\nciphers=A,B\nca=-----BEGIN X-----\\r\\nab\\\\c\\n\n"
                    b"payload=65\nsamples=2\ninterval_us=0\nqos=0\nkeylog=1\n")
    frames = p.encode_run(cell, 64)
    assert frames.begin == f"RUN BEGIN len={len(body)} crc={zlib.crc32(body):08x}"
    decoded = b"".join(base64.b64decode(c.split(" ", 3)[3]) for c in frames.chunks)
    assert decoded == body and frames.end == "RUN END"
    assert [c.split(" ")[2] for c in frames.chunks] == [f"i={i}" for i in range(len(frames.chunks))]


def test_run_cell_refuses_what_the_board_would() -> None:
    with pytest.raises(p.BoardProtocolError):
        p.RunCell(id="a b", host="h", port=1, transport="plain", payload=65, samples=1, interval_us=0)
    with pytest.raises(p.BoardProtocolError):
        p.RunCell(id="a", host="h", port=1, transport="tls", payload=65, samples=1, interval_us=0)
    with pytest.raises(p.BoardProtocolError):
        p.frame_body(b"x", 20)  # no chunk line fits a 20-byte buffer


BANNER = ("BANNER proto=2 board=esp32dev chip=ESP32-D0WD-V3-rev3 mac=24:6f:28:aa:bb:cc fw=abc123 arduino=2.0.14 "
          "idf=v4.4.6 mbedtls=2.28.3 cpu_mhz=240 wifi_ps=none hw_crypto=aes,sha,mpi sw_crypto=chacha20,poly1305 "
          "rx_buf=256 device=e1")


@pytest.mark.parametrize("text,expected", [
    ("READY", Ready()),
    ("ACK begin", Ack("begin")),
    ("ACK chunk i=7", Ack("chunk", index=7)),
    ("ACK run id=c1", Ack("run", run_id="c1")),
    ("ERROR CrcMismatch: RUN body CRC-32 is 1, RUN BEGIN announced 2", BoardError("CrcMismatch",
                                                                                  "RUN body CRC-32 is 1, RUN BEGIN "
                                                                                  "announced 2")),
    ("CLOCK phase=pre i=0 t1=1 t2=2 t3=3 t4=4", ClockSample("pre", 0, 1, 2, 3, 4)),
    ("SYNC phase=post count=8 got=7 status=Ok", Sync("post", 8, 7, "Ok")),
    ("KEYLOG CLIENT_RANDOM aa bb", Keylog("CLIENT_RANDOM aa bb")),
    ("HANDSHAKE tcp_ms=1.250 tls_ms=- connack_ms=0.500 version=- suite=- min_heap=9 heap_before=10",
     Handshake(1.25, None, 0.5, None, None, 9, 10)),
    ("MSG seq=3 t_send_us=1764470000123456 bytes=65 mqtt=84 heap=201000 rssi=-61",
     Msg(3, 1764470000123456, 65, 84, 201000, -61)),
    # QoS 1: the optional PUBACK round trip; a field this host does not know is ignored (version 2 both ways)
    ("MSG seq=3 t_send_us=1764470000123456 bytes=65 mqtt=84 heap=201000 rssi=-61 puback_us=4321 later=x",
     Msg(3, 1764470000123456, 65, 84, 201000, -61, puback_us=4321)),
    ("DONE sent=200 id=c1\r", Done(200, "c1")),
    ("WIFI ip=192.168.1.5 rssi=-60 channel=6", Other("WIFI ip=192.168.1.5 rssi=-60 channel=6")),
    ("ets Jun  8 2016 00:22:57", Other("ets Jun  8 2016 00:22:57")),
])
def test_parse_every_line(text: str, expected: object) -> None:
    assert parse_line(text) == expected


def test_parse_banner() -> None:
    b = parse_line(BANNER)
    assert isinstance(b, Banner)
    assert b.proto == 2 and b.hw_crypto == ("aes", "sha", "mpi") and b.sw_crypto == ("chacha20", "poly1305")
    assert b.rx_buf == 256 and b.extra == {}
    assert parse_line(BANNER + " psram=0").extra == {"psram": "0"}  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["MSG seq=x t_send_us=1 bytes=1 mqtt=1 heap=1 rssi=1",
                                  "MSG seq=1 t_send_us=1 bytes=1 mqtt=1 heap=1 rssi=1 puback_us=-", "DONE sent=1",
                                  "ACK chunk", "ACK nothing", "ERROR no colon here", "BANNER proto=1"])
def test_malformed_protocol_lines_are_named(text: str) -> None:
    with pytest.raises(MalformedLine):
        parse_line(text)


def test_parse_conn_the_line_after_each_connection_of_a_run_that_reconnects() -> None:
    from orchestrator.publishers.board.lines import Conn

    assert parse_line("CONN i=3 tcp_ms=0.5 tls_ms=- connack_ms=1.2 resumed=1 msgs=10 close=drop") == \
        Conn(3, 0.5, None, 1.2, True, 10, "drop")
    assert parse_line("CONN i=0 tcp_ms=0.5 tls_ms=7.1 connack_ms=1.2 resumed=- msgs=1 close=disconnect").resumed is None
