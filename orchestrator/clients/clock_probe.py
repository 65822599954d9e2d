"""The client side of the lab's clock exchange, for a publisher HOST (a board has its own: time_sync.h).

Sends ``--count`` requests to the time-echo service (orchestrator/clients/time_echo.py, same wire format) and
writes one CSV line per answered exchange, ``t1_us,t2_us,t3_us,t4_us``: t1 and t4 on this host's
CLOCK_REALTIME (the clock vdevice stamps its send log with), t2 and t3 on the echo host's. The estimate
(offset, drift and their bound) is made by the orchestrator from these lines (orchestrator/analysis/clock.py).
Standard library only; playbooks/lab.yml runs it on each publisher host before and after a cell.

    python3 -m orchestrator.clients.clock_probe --host 10.0.0.10 --port 9123 --count 16 --out pre.csv
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

from orchestrator.clients import time_echo as wire

HEADER = "t1_us,t2_us,t3_us,t4_us\n"


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
    args = p.parse_args(argv)
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
