"""A block's one capture cut into its cells' captures, while it runs: by time and by connection, losslessly.

The capture of a kept-up lab (lab/keptlab.py) is one pcapng that dumpcap writes packet by packet
(images/capture/capture.sh). When a cell ends, the packets from where the last cut stopped up to the cell's end go
either to the cell's capture/capture.pcapng or to the block's gaps file, never both, never neither:

- a packet goes to the cell when its timestamp is in the cell's window [start, end) AND its TCP connection was
  first seen in that window (a late segment of an earlier cell's connection is not this cell's). A connection
  begins with its client's SYN: a SYN on the ports of an earlier connection is a new one (a reconnecting device
  makes hundreds in a block and the kernel reuses its ephemeral ports: CI lost 3 of a cell's 200 connections);
- every other packet (between two cells: the old clients' FIN/RST, the broker's restart; a packet of a connection
  begun outside the window) and every block other than the header (SHB, IDB) goes to the gaps file.

Each output file starts with the capture's own header blocks, so every one is a valid pcapng, and is 0600 from its
creation, as the capture it is cut from (a plain CONNECT carries its password: orchestrator/model/layout.py
PRIVATE_FILES). The counts of each cut (and, at the end, the whole file's) are returned, so the split is checked:
packets = cells + gaps.

Each cut is checked when it is made, so a loss is the cell's it touched, not only the block's at its teardown: the
packets of the cell's window in the capture, counted apart from the cut (``_Audit``: its own reading of the file,
from the start again when the file no longer holds what it read, as when the capture was truncated or rewritten),
against those the cut took; and what the cut read against what its outputs hold, read back from the disk (the cell's
capture.pcapng, what it appended to the gaps). ``Cut.check`` says whether the cut was lossless and how many packets
are missing or extra.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.results.atomic import open_with_mode
from orchestrator.results.space import write_failed

SHB, IDB, EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
ETHERNET, SLL, SLL2 = 1, 113, 276
Conn = tuple[tuple[bytes, int], tuple[bytes, int]]
Packet = tuple[int, bytes, float, Conn | None, bool]  # block type, block, time, connection, a client's SYN


@dataclass
class Cut:
    """One cell's share: its packets, those of its window sent to the gaps instead, the window's bounds; and its
    check: the window's packets the cut took (to the cell or, another connection's, to the gaps) against those the
    capture holds (counted apart), and what the cut read against what its outputs hold (read back)."""

    packets: int = 0
    to_gaps: int = 0
    start: float = 0.0
    end: float = 0.0
    taken: int = 0  # packets of the window the cut read
    in_capture: int = 0  # packets of the window in the capture, counted apart from the cut
    written: int = 0  # packets in the cell's capture and appended to the gaps, read back

    @property
    def missing(self) -> int:
        """Packets of the window in the capture that the cut did not take, and packets it read that its outputs do
        not hold."""
        return max(0, self.in_capture - self.taken) + max(0, self.packets + self.to_gaps - self.written)

    @property
    def extra(self) -> int:
        """Packets the cut took that the capture does not hold in the window, or that its outputs hold twice."""
        return max(0, self.taken - self.in_capture) + max(0, self.written - self.packets - self.to_gaps)

    def check(self) -> dict[str, Any]:
        """The cut's check, as the cell records it (cell.json lab.capture.split)."""
        return {"lossless": self.missing == 0 == self.extra, "missing": self.missing, "extra": self.extra,
                "window_packets_in_capture": self.in_capture, "window_packets_taken": self.taken,
                "packets_read": self.packets + self.to_gaps, "packets_written": self.written}


@dataclass
class CaptureSplitter:
    """Reads the growing capture from where it stopped; ``cut`` hands one cell its packets."""

    path: Path
    gaps: Path
    offset: int = 0
    header: bytearray = field(default_factory=bytearray)
    endian: str = "<"
    resolutions: list[float] = field(default_factory=list)  # seconds per timestamp unit, per interface
    linktypes: list[int] = field(default_factory=list)
    owner: dict[Conn, str] = field(default_factory=dict)  # the window a connection was first seen in
    gap_packets: int = 0
    cell_packets: int = 0
    not_lossless: dict[str, dict[str, Any]] = field(default_factory=dict)  # the cuts whose check failed, by cell
    _gaps_started: bool = False
    _audit: _Audit = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._audit = _Audit(self.path)

    def cut(self, label: str, start: float, end: float, into: Path) -> Cut:
        """Packets up to ``end`` (seconds, the epoch): those of ``label``'s window to ``into``, the others to the
        gaps file. Packets after ``end`` stay for the next cut."""
        out, gaps, result = bytearray(), bytearray(), Cut(start=start, end=end)
        for kind, block, ts, conn, opens in self._blocks(stop_at=end):
            if kind != EPB:
                gaps += block
                continue
            if conn is not None and (opens or conn not in self.owner):
                self.owner[conn] = label if start <= ts else ""
            result.taken += start <= ts
            if start <= ts < end and (conn is None or self.owner[conn] == label):
                out += block
                result.packets += 1
            else:
                gaps += block
                result.to_gaps += 1
        try:
            into.parent.mkdir(parents=True, exist_ok=True)
            with open_with_mode(into) as f:  # 0600 from its creation: a plain CONNECT's password is in it
                f.write(bytes(self.header) + bytes(out))
        except OSError as exc:  # a full disk names itself and the resume (results/space.py), not a bare OSError
            raise write_failed(into, exc) from exc
        gaps_before = self.gaps.stat().st_size if self.gaps.exists() else 0
        self._to_gaps(gaps, result.to_gaps)
        self.cell_packets += result.packets
        result.in_capture = self._audit.window(start, end, upto=self.offset)
        result.written = count_packets(into) + count_packets(self.gaps, gaps_before, self.endian)
        if result.missing or result.extra:
            self.not_lossless[label] = result.check()
        return result

    def seen_after(self, when: float) -> bool:
        """Whether the file holds a packet at or after ``when`` (then it holds every one before it)."""
        pending = self._blocks(stop_at=when, peek=True)
        return bool(pending) and pending[-1][2] >= when

    def finish(self) -> dict[str, Any]:
        """Everything after the last cut to the gaps (the capture has stopped); the counts, checked against the
        packets in the whole file, the cuts' own checks (the cells whose cut was not lossless) and the bytes of the
        file no block was read from (from one that does not read as a block: a count of packets stops there too)."""
        gaps, n = bytearray(), 0
        for kind, block, _ts, _conn, _opens in self._blocks(stop_at=None):
            gaps += block
            n += kind == EPB
        self._to_gaps(gaps, n)
        total = count_packets(self.path)
        unread = max(0, self.path.stat().st_size - self.offset) if self.path.exists() else 0
        lossless = total == self.cell_packets + self.gap_packets and not self.not_lossless and not unread
        return {"packets": total, "in_cells": self.cell_packets, "in_gaps": self.gap_packets, "lossless": int(lossless),
                **({"cells_not_lossless": self.not_lossless} if self.not_lossless else {}),
                **({"unread_bytes": unread} if unread else {})}

    def _to_gaps(self, blocks: bytearray, packets: int) -> None:
        if not self.header:
            return
        try:
            with open_with_mode(self.gaps, append=True) as f:  # 0600, as every capture
                if not self._gaps_started:
                    f.write(bytes(self.header))
                    self._gaps_started = True
                f.write(bytes(blocks))
        except OSError as exc:
            raise write_failed(self.gaps, exc) from exc
        self.gap_packets += packets

    def _blocks(self, stop_at: float | None, peek: bool = False) -> list[Packet]:
        """The complete blocks from ``offset`` (a torn last one waits for the next read); header blocks are
        kept in ``header``, not returned; an EPB at or after ``stop_at`` ends the read, unconsumed (``peek``: it is
        returned last, and nothing is consumed)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        out: list[Packet] = []
        pos = 0
        while len(data) - pos >= 12:
            kind = struct.unpack_from(self.endian + "I", data, pos)[0]
            if kind == SHB:
                self.endian = "<" if data[pos + 8:pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            length = struct.unpack_from(self.endian + "I", data, pos + 4)[0]
            if length < 12 or len(data) - pos < length:
                break
            block = data[pos:pos + length]
            if kind == EPB:
                ts, conn, opens = self._packet(block)
                if stop_at is not None and ts >= stop_at:
                    if peek:
                        out.append((kind, block, ts, conn, opens))
                    break
                out.append((kind, block, ts, conn, opens))
            elif kind in (SHB, IDB):
                if not peek or self.offset == 0:  # a peek from the start (re)reads the header, as the read will
                    self._header_block(kind, block)
            else:
                out.append((kind, block, 0.0, None, False))
            pos += length
        if not peek:
            self.offset += pos
        return out

    def _header_block(self, kind: int, block: bytes) -> None:
        if kind == SHB:
            self.header.clear()
            self.resolutions.clear()
            self.linktypes.clear()
        else:
            self.linktypes.append(struct.unpack_from(self.endian + "H", block, 8)[0])
            self.resolutions.append(_resolution(block, self.endian))
        self.header += block

    def _packet(self, block: bytes) -> tuple[float, Conn | None, bool]:
        iface, high, low, caplen = struct.unpack_from(self.endian + "IIII", block, 8)
        resolution = self.resolutions[iface] if iface < len(self.resolutions) else 1e-6
        linktype = self.linktypes[iface] if iface < len(self.linktypes) else ETHERNET
        conn, opens = connection(block[28:28 + caplen], linktype)
        return ((high << 32) | low) * resolution, conn, opens


@dataclass
class _Audit:
    """The capture read apart from the cut, for its check: the packets of a window, read on from where the last
    window stopped while the file still holds the block read last there (else from its start again: the capture was
    truncated or rewritten under the cut, whose packets the cut did not take)."""

    path: Path
    offset: int = 0
    last: bytes = b""  # the last block read, which ends at ``offset``
    endian: str = "<"
    resolutions: list[float] = field(default_factory=list)

    def window(self, start: float, end: float, upto: int) -> int:
        """The packets with a time in [start, end), up to the first at or after ``end`` and at most to byte ``upto``
        (where the cut stopped reading: what was written since is the next cut's)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset - len(self.last))
                data = f.read()
                if not data.startswith(self.last):  # not the file read before: from its start again, to its end
                    f.seek(0)
                    data, self.offset, self.last, self.resolutions, upto = f.read(), 0, b"", [], -1
        except FileNotFoundError:
            return 0
        base = self.offset - len(self.last)
        pos, limit, n = len(self.last), len(data) if upto < 0 else min(len(data), upto - base), 0
        while limit - pos >= 12:
            kind = struct.unpack_from(self.endian + "I", data, pos)[0]
            if kind == SHB:
                self.endian = "<" if data[pos + 8:pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
                self.resolutions = []
            length = struct.unpack_from(self.endian + "I", data, pos + 4)[0]
            if length < 12 or limit - pos < length:
                break
            if kind == IDB:
                self.resolutions.append(_resolution(data[pos:pos + length], self.endian))
            elif kind == EPB:
                iface, high, low = struct.unpack_from(self.endian + "III", data, pos + 8)
                ts = ((high << 32) | low) * (self.resolutions[iface] if iface < len(self.resolutions) else 1e-6)
                if ts >= end:
                    break
                n += start <= ts
            self.last, pos = data[pos:pos + length], pos + length
        self.offset = base + pos
        return n


def _resolution(idb: bytes, endian: str) -> float:
    """if_tsresol (option 9) of an IDB: 10^-n, or 2^-n with the top bit set; microseconds without it."""
    pos, end = 16, len(idb) - 4
    while pos + 4 <= end:
        code, length = struct.unpack_from(endian + "HH", idb, pos)
        if code == 0:
            break
        if code == 9 and length >= 1:
            v = idb[pos + 4]
            return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
        pos += 4 + (length + 3) // 4 * 4
    return 1e-6


def connection(frame: bytes, linktype: int) -> tuple[Conn | None, bool]:
    """The TCP connection of a frame as its two (address, port) ends in a fixed order (None when not TCP/IP), and
    whether the frame opens it (SYN without ACK)."""
    if linktype == ETHERNET:
        ethertype, pos = struct.unpack_from("!H", frame, 12)[0] if len(frame) >= 14 else 0, 14
        while ethertype in (0x8100, 0x88A8) and len(frame) >= pos + 4:
            ethertype, pos = struct.unpack_from("!H", frame, pos + 2)[0], pos + 4
    elif linktype == SLL:
        ethertype, pos = struct.unpack_from("!H", frame, 14)[0] if len(frame) >= 16 else 0, 16
    elif linktype == SLL2:
        ethertype, pos = struct.unpack_from("!H", frame, 0)[0] if len(frame) >= 20 else 0, 20
    else:
        return None, False
    if ethertype == 0x0800 and len(frame) >= pos + 20 and frame[pos + 9] == 6:
        src, dst, tcp = frame[pos + 12:pos + 16], frame[pos + 16:pos + 20], pos + (frame[pos] & 0x0F) * 4
    elif ethertype == 0x86DD and len(frame) >= pos + 40 and frame[pos + 6] == 6:
        src, dst, tcp = frame[pos + 8:pos + 24], frame[pos + 24:pos + 40], pos + 40
    else:
        return None, False
    if len(frame) < tcp + 4:
        return None, False
    sport, dport = struct.unpack_from("!HH", frame, tcp)
    a, b = (src, sport), (dst, dport)
    opens = len(frame) > tcp + 13 and frame[tcp + 13] & 0x12 == 0x02
    return ((a, b) if a <= b else (b, a)), opens


def count_packets(path: Path, offset: int = 0, endian: str = "<") -> int:
    """The packets (EPBs) of a pcapng file (from byte ``offset``, a block's start, read in ``endian`` until a section
    header says otherwise); a torn last block is not counted."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return 0
    pos, n = 0, 0
    while len(data) - pos >= 12:
        kind = struct.unpack_from(endian + "I", data, pos)[0]
        if kind == SHB:
            endian = "<" if data[pos + 8:pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        length = struct.unpack_from(endian + "I", data, pos + 4)[0]
        if length < 12 or len(data) - pos < length:
            break
        n += kind == EPB
        pos += length
    return n
