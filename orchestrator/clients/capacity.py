"""Can this publisher host carry its share of a fleet? Checked ON the host, before anything of the cell starts.

playbooks/tasks/lab_up.yml runs it on every publisher host right after the host's description, as one task that
stops the whole play when it fails on any host (any_errors_fatal): no broker, capture or device is started anywhere.
It reads the host's own limits, as the fleet will meet them (labhost.py raises the soft open-file limit to the hard
one; the fleet raises its soft thread limit: the hard limits are what count):

* RLIMIT_NOFILE (hard): each worker process of the fleet holds one descriptor per device, at most FD_SETSIZE less
  what it has open less 16 reserved (firmware/platformio/host/src/fleet/fleet_shard.cpp), so the share needs
  ceil(share / workers) + 3 + 16;
* RLIMIT_NPROC (hard; not enforced for root): a thread per device, plus 64;
* the ephemeral port range (net.ipv4.ip_local_port_range): a local port per device's open connection.

Prints ``key=value`` lines (cores, memory, the limits, the port range) and, for every limit a share exceeds, one
line naming the host, the limit and the hint; exit 1 then. Standard library only.

    python3 -m orchestrator.clients.capacity --host pub-a --devices 1700
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
from pathlib import Path

FD_SETSIZE = 1024  # select()'s limit: the fleet's devices per worker process
OPEN_AT_START = 3  # stdin, stdout, stderr
FD_RESERVE = 16  # fleet_shard.h kFdReserve
THREADS_RESERVE = 64  # fleet_shard.cpp ensure_limits


def host_limits() -> dict[str, int | None]:
    """The host's figures (None: unlimited or unreadable)."""
    def hard(which: int) -> int | None:
        value = resource.getrlimit(which)[1]
        return None if value == resource.RLIM_INFINITY else int(value)

    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        ports: int | None = high - low + 1
    except (OSError, ValueError):
        ports = None
    try:
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        mem_kb: int | None = int(meminfo["MemAvailable"].split()[0])
    except (OSError, KeyError, ValueError):
        mem_kb = None
    return {"cores": os.cpu_count(), "mem_available_kb": mem_kb, "nofile_hard": hard(resource.RLIMIT_NOFILE),
            "nproc_hard": hard(resource.RLIMIT_NPROC), "uid": os.getuid(), "ephemeral_ports": ports}


def needs(devices: int) -> dict[str, int]:
    """What a share of ``devices`` needs of each limit."""
    per_worker = FD_SETSIZE - OPEN_AT_START - FD_RESERVE
    workers = max(1, math.ceil(devices / per_worker))
    return {"nofile": math.ceil(devices / workers) + OPEN_AT_START + FD_RESERVE,
            "nproc": devices + THREADS_RESERVE, "ports": devices}


def problems(host: str, devices: int, have: dict[str, int | None]) -> list[str]:
    """One line per limit the share exceeds: the host, the limit, what it needs, the hint."""
    need = needs(devices)
    out = []
    share = f"{host}: its share of {devices} devices"
    if have["nofile_hard"] is not None and have["nofile_hard"] < need["nofile"]:
        out.append(f"{share} needs {need['nofile']} open files per fleet process; RLIMIT_NOFILE (hard) is "
                   f"{have['nofile_hard']}: raise it on the host (limits.conf nofile, LimitNOFILE=, docker --ulimit "
                   "nofile) or give it a smaller publisher_weight")
    if have["uid"] != 0 and have["nproc_hard"] is not None and have["nproc_hard"] < need["nproc"]:
        out.append(f"{share} needs {need['nproc']} threads; RLIMIT_NPROC (hard) is {have['nproc_hard']}: raise it "
                   "(limits.conf nproc) or give the host a smaller publisher_weight")
    if have["ephemeral_ports"] is not None and have["ephemeral_ports"] < need["ports"]:
        out.append(f"{share} needs {need['ports']} local ports; net.ipv4.ip_local_port_range holds "
                   f"{have['ephemeral_ports']}: widen it or give the host a smaller publisher_weight")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="capacity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", required=True, help="the inventory's name of this host (named in every refusal)")
    p.add_argument("--devices", type=int, required=True, help="the devices of this host's share")
    args = p.parse_args(argv)
    have = host_limits()
    for key, value in have.items():
        print(f"{key}={'' if value is None else value}")
    found = problems(args.host, args.devices, have)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
