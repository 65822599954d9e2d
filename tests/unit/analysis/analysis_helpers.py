"""Shared helpers for the analysis tests: the reference captures, log conversion, an independent
pcap walk (struct over record headers, no tshark)."""

from __future__ import annotations

import csv
import os
import struct
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# variant -> (broker port, tls, key log, expected (version, suite))
VARIANTS = {
    "plain": (1883, False, None, None),
    "t12chacha": (8883, True, "lat_t12chacha.keys.log", ("TLS 1.2", 0xCCA8)),
    "t13chacha": (8884, True, "lat_t13chacha.keys.log", ("TLS 1.3", 0x1303)),
    "t12aes": (8885, True, "lat_t12aes.keys.log", ("TLS 1.2", 0xC02F)),
}
SAMPLES = {100: 200, 65: 100}  # payload bytes -> messages in the reference capture's session


def reference_dir() -> Path:
    raw = os.environ.get("TESTBED_REFERENCE_CAPTURES")
    path = Path(raw) if raw else (REPO.parent / "shared" / "reference-captures")
    return path.resolve()


def convert_reference_csv(src: Path, out_dir: Path) -> tuple[Path, Path]:
    """Reference ``seq,send_ns,recv_ns,len`` -> our publisher and subscriber logs."""
    pub, sub = out_dir / f"pub_{src.stem}.csv", out_dir / f"sub_{src.stem}.csv"
    with src.open() as fh, pub.open("w") as p, sub.open("w") as s:
        p.write("seq,t_send_us,bytes\n")
        s.write("seq,t_recv_us,bytes,dup\n")
        for row in csv.DictReader(fh):
            p.write(f"{row['seq']},{int(row['send_ns']) // 1000},{row['len']}\n")
            s.write(f"{row['seq']},{int(row['recv_ns']) // 1000},{row['len']},0\n")
    return pub, sub


def reference_rows(src: Path) -> list[dict[str, int]]:
    with src.open() as fh:
        return [{k: int(v) for k, v in row.items()} for row in csv.DictReader(fh)]


@dataclass(frozen=True)
class Frame:
    t_us: int
    orig_len: int
    src_port: int | None
    dst_port: int | None
    tcp_payload: int


def walk_pcap(path: Path) -> list[Frame]:
    """Independent reader: classic pcap, Ethernet/IPv4/TCP, record headers by struct."""
    data = path.read_bytes()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    off, out = 24, []
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from(endian + "IIII", data, off)
        pkt = data[off + 16: off + 16 + incl]
        off += 16 + incl
        if len(pkt) < incl:
            break
        t_us = sec * 1_000_000 + (frac // 1000 if nano else frac)
        sport = dport = None
        tcp_payload = 0
        if len(pkt) >= 34 and pkt[12:14] == b"\x08\x00" and pkt[23] == 6:
            ihl = (pkt[14] & 0x0F) * 4
            total = struct.unpack_from("!H", pkt, 16)[0]
            tcp = 14 + ihl
            sport, dport = struct.unpack_from("!HH", pkt, tcp)
            thl = (pkt[tcp + 12] >> 4) * 4
            tcp_payload = total - ihl - thl
        out.append(Frame(t_us, orig, sport, dport, tcp_payload))
    return out
