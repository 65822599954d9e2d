"""Walk a pcap or pcapng file's record headers (no dissection) to count packets and find a cut tail.

tshark reads every complete packet of a truncated file and then exits 2; it does not say how many
bytes it dropped. This walk does, so the analysis can warn precisely.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import TestbedError

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",  # microsecond timestamps
    b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">",  # nanosecond timestamps
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_PCAPNG_PACKET_BLOCKS = {2, 3, 6}  # obsolete packet, simple packet, enhanced packet


@dataclass(frozen=True)
class PcapScan:
    """What the record-header walk found."""

    path: Path
    fmt: str              # "pcap" | "pcapng"
    size_bytes: int
    packets: int          # complete packet records
    truncated_bytes: int  # bytes after the last complete record that do not form a whole record


def capture_format(path: Path) -> str:
    """"pcap" or "pcapng" from the first bytes; TestbedError for an empty or foreign file."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise TestbedError(f"cannot read capture {path}: {exc.strerror}") from exc
    if not magic:
        raise TestbedError(f"capture {path} is empty (0 bytes)",
                           hint="the capture sidecar wrote nothing: was it started before the clients?")
    if magic in _PCAP_MAGICS:
        return "pcap"
    if magic == _PCAPNG_SHB:
        return "pcapng"
    raise TestbedError(f"{path} is not a pcap or pcapng file (magic {magic.hex()})")


def scan_capture(path: Path) -> PcapScan:
    """Count complete packet records of ``path``; raise TestbedError when it is no capture at all."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TestbedError(f"cannot read capture {path}: {exc.strerror}") from exc
    if not data:
        raise TestbedError(f"capture {path} is empty (0 bytes)",
                           hint="the capture sidecar wrote nothing: was it started before the clients?")
    magic = data[:4]
    if magic in _PCAP_MAGICS:
        return _scan_pcap(path, data, _PCAP_MAGICS[magic])
    if magic == _PCAPNG_SHB:
        return _scan_pcapng(path, data)
    raise TestbedError(f"{path} is not a pcap or pcapng file (magic {magic.hex()})")


def _scan_pcap(path: Path, data: bytes, endian: str) -> PcapScan:
    if len(data) < 24:
        return PcapScan(path, "pcap", len(data), 0, len(data))
    rec = struct.Struct(endian + "IIII")
    off, n, size = 24, 0, len(data)
    while off + 16 <= size:
        incl_len = rec.unpack_from(data, off)[2]
        if off + 16 + incl_len > size:
            break
        off += 16 + incl_len
        n += 1
    return PcapScan(path, "pcap", size, n, size - off)


def _scan_pcapng(path: Path, data: bytes) -> PcapScan:
    size = len(data)
    if size < 12:
        return PcapScan(path, "pcapng", size, 0, size)
    bom = data[8:12]
    endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
    hdr = struct.Struct(endian + "II")
    off, n = 0, 0
    while off + 12 <= size:
        btype, blen = hdr.unpack_from(data, off)
        if btype == 0x0A0D0D0A:  # a new section may switch byte order
            endian = "<" if data[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            hdr = struct.Struct(endian + "II")
            btype, blen = hdr.unpack_from(data, off)
        if blen < 12 or blen % 4 or off + blen > size:
            break
        if btype in _PCAPNG_PACKET_BLOCKS:
            n += 1
        off += blen
    return PcapScan(path, "pcapng", size, n, size - off)
