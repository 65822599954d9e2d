"""The lab's time-echo service: the server side of the board's NTP-style clock exchanges.

A board (firmware/platformio/lib/testbed_core/src/time_sync.h, which holds the wire format) sends a
40-byte request carrying a sequence number and its send time t1; this service answers with the seq,
t1 echoed, t2 (when the request arrived) and t3 (just before the answer leaves), in microseconds of
this host's CLOCK_REALTIME, the clock the subscriber stamps ``t_recv_us`` with. t2 is the kernel's
receive timestamp (SO_TIMESTAMPNS) where the platform has it, else the time ``recvmsg`` returned.

Datagrams that are not a valid request are ignored. Nothing is logged per packet: one line on
start-up (``time_echo: listening on HOST:PORT``, the real port when ``--port 0``) and one on exit
with the counts. Runs inside the subscriber container: standard library only.

    python -m orchestrator.clients.time_echo --port 9123
"""

from __future__ import annotations

import argparse
import platform
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from types import FrameType

MAGIC = b"TBTS"
VERSION = 1
KIND_REQUEST = 1
KIND_REPLY = 2
FLAG_KERNEL_RX_TIMESTAMP = 0x0001
# magic, version, kind, flags, seq, reserved, t1, t2, t3: big-endian, 40 bytes
WIRE = struct.Struct("!4sBBHIIqqq")
SIZE = WIRE.size
# Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS) on the architectures that use the generic value;
# Python's socket module does not export it.
_GENERIC_SO_TIMESTAMPNS = 35
_GENERIC_ABI = {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "armv6l", "riscv64", "s390x",
                "ppc64le"}


def so_timestampns() -> int | None:
    """The SO_TIMESTAMPNS option number of this platform, or None where we do not know it."""
    value = getattr(socket, "SO_TIMESTAMPNS", None)
    if value is not None:
        return int(value)
    if sys.platform == "linux" and platform.machine().lower() in _GENERIC_ABI:
        return _GENERIC_SO_TIMESTAMPNS
    return None


def parse_request(data: bytes) -> tuple[int, int] | None:
    """(seq, t1_us) of a valid request, None for anything else."""
    if len(data) != SIZE:
        return None
    magic, version, kind, _flags, seq, _reserved, t1, _t2, _t3 = WIRE.unpack(data)
    if magic != MAGIC or version != VERSION or kind != KIND_REQUEST:
        return None
    return seq, t1


def encode_reply(seq: int, t1_us: int, t2_us: int, t3_us: int, *, kernel_rx: bool) -> bytes:
    flags = FLAG_KERNEL_RX_TIMESTAMP if kernel_rx else 0
    return WIRE.pack(MAGIC, VERSION, KIND_REPLY, flags, seq, 0, t1_us, t2_us, t3_us)


def kernel_rx_ns(ancdata: list[tuple[int, int, bytes]], option: int | None) -> int | None:
    """The SCM_TIMESTAMPNS receive time in the ancillary data (struct timespec), if there is one."""
    if option is None:
        return None
    for level, kind, data in ancdata:
        if level != socket.SOL_SOCKET or kind != option:
            continue
        if len(data) >= 16:
            sec, nsec = struct.unpack("=qq", data[:16])
        elif len(data) >= 8:  # 32-bit time_t
            sec, nsec = struct.unpack("=ii", data[:8])
        else:
            return None
        return sec * 1_000_000_000 + nsec
    return None


@dataclass
class Counts:
    answered: int = 0
    ignored: int = 0
    kernel_stamped: int = 0


class TimeEcho:
    """A bound UDP socket answering requests one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.option = so_timestampns()
        if self.option is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, self.option, 1)
            except OSError:
                self.option = None
        self.counts = Counts()
        self._anc_size = socket.CMSG_SPACE(16)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    def serve_one(self) -> None:
        """Waits for one datagram and answers it if it is a valid request."""
        try:  # one byte more than a request, so a longer datagram shows by its length
            data, ancdata, _flags, peer = self.sock.recvmsg(SIZE + 1, self._anc_size)
        except ConnectionError:  # an ICMP error for an earlier reply, where the platform reports it
            self.counts.ignored += 1
            return
        now_ns = time.time_ns()
        request = parse_request(data)
        if request is None:
            self.counts.ignored += 1
            return
        rx_ns = kernel_rx_ns(ancdata, self.option)
        kernel = rx_ns is not None and 0 < rx_ns <= now_ns
        t2_us = (rx_ns if kernel and rx_ns is not None else now_ns) // 1000
        seq, t1_us = request
        reply = encode_reply(seq, t1_us, t2_us, time.time_ns() // 1000, kernel_rx=kernel)  # t3: just before sendto
        try:
            self.sock.sendto(reply, peer)
        except OSError:  # the board's address is unreachable just now: its exchange is lost
            self.counts.ignored += 1
            return
        self.counts.answered += 1
        self.counts.kernel_stamped += int(kernel)

    def serve_forever(self) -> None:
        while True:
            self.serve_one()

    def close(self) -> None:
        self.sock.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed-time-echo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="0.0.0.0", help="address to bind (default: all)")
    p.add_argument("--port", type=int, required=True, help="UDP port (0: any free port, printed on start-up)")
    return p


def _stop(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        echo = TimeEcho(args.host, args.port)
    except OSError as exc:
        print(f"time_echo: cannot bind UDP {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    signal.signal(signal.SIGTERM, _stop)
    host, port = echo.address
    stamp = "kernel receive timestamps" if echo.option is not None else "user-space receive timestamps"
    print(f"time_echo: listening on {host}:{port} ({stamp})", file=sys.stderr, flush=True)
    try:
        echo.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        c = echo.counts
        print(f"time_echo: answered {c.answered} ({c.kernel_stamped} kernel-stamped), ignored {c.ignored}",
              file=sys.stderr, flush=True)
        echo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
