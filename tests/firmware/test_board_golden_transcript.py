"""A golden transcript pins the serial control protocol byte for byte: a fixed sequence of RUNs that
need no broker (refused by framing, by the body, by validation, by a closed port) against the real
board-emu. A change to any line, the framing or the body encoding shows up as a diff here; it must
come with a protocol version bump (board_protocol.h kVersion, protocol.py VERSION).

Regenerate after an intended change: TESTBED_REGENERATE_GOLDEN=1 pytest tests/firmware -k golden
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.link import BoardLink, BoardRunRefused

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "board_protocol" / "transcript.txt"
CELL = p.RunCell(id="golden-1", host="127.0.0.1", port=1, transport="plain", payload=65, samples=3,
                 interval_us=1000, connect_timeout_ms=1, topic="testbed/golden", client_id="golden-client",
                 username="publisher", password="p w=\\x")  # two chunks at 256 B, an escaped backslash


def _session(link: BoardLink) -> None:
    link.wait_ready(timeout_s=10)
    body = p.encode_body(CELL)
    for frames in (p.frame_body(body + b"colour=blue\n", 256),  # UnknownKey
                   dataclasses.replace(p.frame_body(body, 256), begin=f"RUN BEGIN len={len(body)} crc=00000000"),
                   p.encode_run(CELL.replace(payload=40), 256),  # PayloadTooSmall
                   p.encode_run(CELL.replace(qos=1, session="persistent", topic_alias="on"), 256)):
        # version 3's keys: InvalidArgument, a topic alias is MQTT 5's
        with pytest.raises(BoardRunRefused):
            link.send_frames(frames, CELL.id)
    link.send_run(CELL)  # accepted; the connection is refused
    list(link.run_lines(10))
    link.write_line(p.CMD_STOP)  # no run going: READY
    assert link.read_text(5) == p.LINE_READY
    link.write_line(p.CMD_HELLO)
    link.wait_ready(timeout_s=10)


def test_golden_transcript(board_emu) -> None:
    emu = board_emu("--banner-mbedtls", "2.28.x")
    wire: list[str] = []  # the unredacted lines: the RUN chunks are part of what is pinned
    with BoardLink(emu.pty, wire=wire) as link:
        _session(link)
    text = "\n".join(wire) + "\n"
    if os.environ.get("TESTBED_REGENERATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), f"the transcript changed; compare with {GOLDEN}"
