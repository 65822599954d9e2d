"""What bench/fleet_loader.py and its paho worker (bench/paho_loader.py) share: the cipher suite's names and
readings of /proc (a process tree, its threads' CPU, its PSS). Imports nothing of either, so neither imports
the other's module for them."""

from __future__ import annotations

import os
from pathlib import Path

CHACHA_OPENSSL = "ECDHE-ECDSA-CHACHA20-POLY1305"
CHACHA_IANA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        pids.append(todo.pop())
        try:
            todo += [int(c) for c in Path(f"/proc/{pids[-1]}/task/{pids[-1]}/children").read_text().split()]
        except OSError:
            pass
    return pids


def read_proc(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def thread_cpu_ns(pids: list[int]) -> dict[tuple[int, str], int]:
    out = {}
    for pid in pids:
        tids = os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []
        for tid in tids:
            fields = read_proc(f"/proc/{pid}/task/{tid}/schedstat").split()
            if fields:
                out[(pid, tid)] = int(fields[0])
    return out


def pss_kb(pids: list[int]) -> int:
    lines = (x for pid in pids for x in read_proc(f"/proc/{pid}/smaps_rollup").splitlines())
    return sum(int(x.split()[1]) for x in lines if x.startswith("Pss:"))
