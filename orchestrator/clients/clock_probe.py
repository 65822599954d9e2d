"""The client side of the lab's clock exchange, for a publisher HOST (a board has its own: time_sync.h).

Sends ``--count`` requests to the time-echo service (orchestrator/clients/time_echo.py, same wire format) and
writes one CSV line per answered exchange, ``t1_us,t2_us,t3_us,t4_us``: t1 and t4 on this host's
CLOCK_REALTIME (the clock vdevice stamps its send log with), t2 and t3 on the echo host's. The estimate
(offset, drift and their bound) is made by the orchestrator from these lines (orchestrator/analysis/clock.py).
Standard library only; playbooks/lab.yml runs it on each publisher host before and after a cell.

``--discipline FILE``: the host's time discipline as JSON besides: the kernel's ``adjtimex`` state read without
changing it (status bits, the offset it is still slewing away, its frequency correction) and which of chronyd,
ntpd and systemd-timesyncd run. A slew between the two exchanges breaks the linear drift the bound assumes.

    python3 -m orchestrator.clients.clock_probe --host 10.0.0.10 --port 9123 --count 16 --out pre.csv
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import socket
import sys
import time
from pathlib import Path

from orchestrator.clients import time_echo as wire

HEADER = "t1_us,t2_us,t3_us,t4_us\n"
DAEMONS = ("chronyd", "ntpd", "systemd-timesyn", "openntpd", "ntpd-rs")  # /proc/<pid>/comm (15 characters)
STA_PLL, STA_UNSYNC, STA_NANO = 0x0001, 0x0040, 0x2000


class Timex(ctypes.Structure):
    """struct timex (linux/timex.h)."""

    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time_sec", ctypes.c_long), ("time_usec", ctypes.c_long), ("tick", ctypes.c_long),
                ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long), ("shift", ctypes.c_int),
                ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long),
                ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int),
                ("_reserved", ctypes.c_int * 11)]


def adjtimex() -> dict[str, object]:
    """The kernel clock's discipline, read only (modes 0 needs no privilege)."""
    tx = Timex()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError) as exc:
        return {"available": False, "reason": str(exc)}
    if state < 0:
        return {"available": False, "reason": os.strerror(ctypes.get_errno())}
    offset_us = tx.offset / 1000 if tx.status & STA_NANO else float(tx.offset)
    return {"available": True, "state": state, "status": tx.status, "pll": bool(tx.status & STA_PLL),
            "unsynchronised": bool(tx.status & STA_UNSYNC), "offset_us": offset_us,
            "freq_ppm": tx.freq / 65536, "maxerror_us": tx.maxerror, "esterror_us": tx.esterror}


def daemons() -> list[str]:
    found = set()
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:
            continue
        if name in DAEMONS:
            found.add(name)
    return sorted(found)


def discipline() -> dict[str, object]:
    return {"adjtimex": adjtimex(), "daemons": daemons()}


def request(seq: int, t1_us: int) -> bytes:
    return wire.WIRE.pack(wire.MAGIC, wire.VERSION, wire.KIND_REQUEST, 0, seq, 0, t1_us, 0, 0)


def parse_reply(data: bytes, seq: int, t1_us: int) -> tuple[int, int] | None:
    """(t2, t3) of the reply to request ``seq`` sent at ``t1_us``; None for anything else."""
    if len(data) != wire.SIZE:
        return None
    magic, version, kind, _flags, got_seq, _r, t1, t2, t3 = wire.WIRE.unpack(data)
    if magic != wire.MAGIC or version != wire.VERSION or kind != wire.KIND_REPLY or got_seq != seq or t1 != t1_us:
        return None
    return t2, t3


def exchange(sock: socket.socket, seq: int, timeout_s: float) -> tuple[int, int, int, int] | None:
    t1 = time.time_ns() // 1000
    sock.send(request(seq, t1))
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            data = sock.recv(wire.SIZE + 1)
        except (TimeoutError, ConnectionError):  # lost, or refused (an ICMP error for an earlier request)
            return None
        t4 = time.time_ns() // 1000
        got = parse_reply(data, seq, t1)
        if got is not None:
            return t1, got[0], got[1], t4


def probe(host: str, port: int, count: int, gap_s: float = 0.01,
          timeout_s: float = 0.5) -> list[tuple[int, int, int, int]]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))
        samples = []
        for seq in range(1, count + 1):
            got = exchange(sock, seq, timeout_s)
            if got is not None:
                samples.append(got)
            time.sleep(gap_s)
    return samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="clock_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--discipline", type=Path, help="the host's time discipline as JSON (adjtimex, daemons)")
    args = p.parse_args(argv)
    if args.discipline is not None:
        args.discipline.parent.mkdir(parents=True, exist_ok=True)
        args.discipline.write_text(json.dumps(discipline()) + "\n")
    try:
        samples = probe(args.host, args.port, args.count)
    except OSError as exc:
        print(f"clock_probe: {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(HEADER + "".join(",".join(map(str, s)) + "\n" for s in samples))
    print(f"clock_probe: {len(samples)} of {args.count} exchanges answered by {args.host}:{args.port}")
    return 0 if samples else 1


if __name__ == "__main__":
    sys.exit(main())
