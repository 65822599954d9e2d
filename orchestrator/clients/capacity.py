"""Can this publisher host carry its share of a fleet? Checked ON the host, before anything of the cell starts.

playbooks/tasks/lab_up.yml runs it on every publisher host right after the host's description, as one task that
stops the whole play when it fails on any host (any_errors_fatal): no broker, capture or device is started anywhere.
It reads the host's own limits, as the fleet will meet them (labhost.py raises the soft open-file limit to the hard
one; the fleet raises its soft thread limit: the hard limits are what count):

* RLIMIT_NOFILE (hard): each worker process of the fleet holds one descriptor per device, at most FD_SETSIZE less
  what it has open less 16 reserved (firmware/platformio/host/src/fleet/fleet_shard.cpp), so the share needs
  ceil(share / workers) + 3 + 16;
* RLIMIT_NPROC (hard; not enforced for root): a thread per device, plus 64;
* the ephemeral port range (net.ipv4.ip_local_port_range): a local port per device's open connection;
* memory, from the figures the capacity bench measured (FLEET_MEMORY, below): the share's resident memory (its
  devices x a device's, plus each fleet process's fixed part) against MemAvailable (/proc/meminfo) and, on a host
  whose memory cgroup has a limit (a container started with --memory, a systemd MemoryMax=), against that
  cgroup's room (its limit less its usage, the inactive page cache not counted, as `docker stats` counts it; the
  tightest of the cgroup and its ancestors); its address space per fleet process (each device's thread reserves a
  256 KiB stack) against RLIMIT_AS, the soft limit (nothing of ours raises it); and, when the kernel does not
  overcommit (vm.overcommit_memory=2), the share's committed memory (the stacks are committed whole) against
  CommitLimit less Committed_AS.

Prints ``key=value`` lines (cores, memory, the limits, the port range) and, for every limit a share exceeds, one
line naming the host, the limit (what the share needs and what the host has) and the hint; exit 1 then. Standard
library only.

    python3 -m orchestrator.clients.capacity --host pub-a --devices 1700 --transport tls
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

FD_SETSIZE = 1024  # select()'s limit: the fleet's devices per worker process
OPEN_AT_START = 3  # stdin, stdout, stderr
FD_RESERVE = 16  # fleet_shard.h kFdReserve
THREADS_RESERVE = 64  # fleet_shard.cpp ensure_limits
HINT = "give the host a smaller publisher_weight or add publisher hosts"


@dataclass(frozen=True)
class MemoryCost:
    """Memory in kB: resident (what MemAvailable and a memory cgroup must hold) and address space (what RLIMIT_AS
    and, without overcommit, the commit limit must hold)."""

    resident_kb: int
    address_kb: int


# The fleet's memory, measured by the capacity bench, mid-run once every device sent its first reading, on the
# 2-core development host at a load average of 5 (1 reading/s, 50 and 300 devices, one fleet process; FIGURES_FROM
# printed 40.5 and 111.6 kB resident, 262 and 267 kB of address space per device, plain and TLS; the fixed part
# 4105 and 4866 kB resident, 989899 and 989933 kB of address space):
#   per device: the slope between the two sizes ("memory per device" in its output); a TLS device's mbedTLS
#     context with its two 16 KiB record buffers and its parsed CA certificate make the difference to a plain one;
#     the address space is its thread's 256 KiB stack (fleet_main.cpp kThreadStack) and guard page, committed whole;
#   per fleet process: the intercept at 0 devices ("the fixed part"): resident, the program, its libraries and
#     heap; of its address space all but 6859 kB are glibc malloc's arenas, one per thread up to 8 per core, each
#     reserving 64 MiB (not committed): 15 more than the main one on 2 cores (15 x 65536 kB), so ARENA_KB per arena
#     beyond the first, 8 x cores of them, is added for the host's cores.
FIGURES_FROM = ".venv/bin/python bench/fleet_capacity.py --modes plain,tls --intervals 1s --sizes 50,300"
FLEET_MEMORY = {"plain": MemoryCost(resident_kb=41, address_kb=262), "tls": MemoryCost(resident_kb=112, address_kb=267)}
FLEET_PROCESS = MemoryCost(resident_kb=4866, address_kb=6859)
ARENA_KB, ARENAS_PER_CORE = 65536, 8


def meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """/proc/meminfo's kB figures by name."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        name, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            out[name.strip()] = int(value.split()[0])
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2's "max": no limit


def _inactive_file(stat: Path) -> int:
    """The cgroup's inactive page cache (bytes): reclaimed before the limit is hit."""
    try:
        fields = dict(line.split(None, 1) for line in stat.read_text().splitlines() if " " in line)
    except OSError:
        return 0
    value = fields.get("total_inactive_file", fields.get("inactive_file", "0")).strip()  # v1 counts the subtree
    return int(value) if value.isdigit() else 0


def _memory_dirs(root: Path, self_cgroup: Path) -> list[Path]:
    """This process's memory cgroup folder and its ancestors up to ``root``'s mount (v2: the one hierarchy; v1: the
    memory controller's). In a container the cgroup's own folder is the mount itself, its path not below it."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _id, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            mount = root / "memory"
            break
    else:
        v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
        if not v2:
            return []
        mount, path = root, v2[0]
    folder = mount / path.strip("/")
    if not folder.is_dir():
        folder = mount
    return [folder, *[p for p in folder.parents if p.is_relative_to(mount)]]


def cgroup_memory(root: Path = Path("/sys/fs/cgroup"),
                  self_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[int | None, int | None]:
    """(limit, room) in kB of the tightest memory cgroup limit over this process's cgroup and its ancestors (room:
    the limit less the usage, the inactive page cache not counted); (None, None) without a limit."""
    best: tuple[int | None, int | None] = (None, None)
    for folder in _memory_dirs(root, self_cgroup):
        v2 = (folder / "memory.max").exists()
        limit = _read_int(folder / ("memory.max" if v2 else "memory.limit_in_bytes"))
        usage = _read_int(folder / ("memory.current" if v2 else "memory.usage_in_bytes"))
        if limit is None or limit >= 1 << 60 or usage is None:  # v1 writes "no limit" as a page-rounded 2^63 - 1
            continue
        room = max(0, limit - max(0, usage - _inactive_file(folder / "memory.stat")))
        if best[1] is None or room // 1024 < best[1]:
            best = (limit // 1024, room // 1024)
    return best


def host_limits() -> dict[str, int | None]:
    """The host's figures (None: unlimited or unreadable)."""
    def limit(which: int, soft: bool = False) -> int | None:
        value = resource.getrlimit(which)[0 if soft else 1]
        return None if value == resource.RLIM_INFINITY else int(value)

    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        ports: int | None = high - low + 1
    except (OSError, ValueError):
        ports = None
    mem = meminfo()
    cg_limit, cg_room = cgroup_memory()
    address = limit(resource.RLIMIT_AS, soft=True)
    commit = mem["CommitLimit"] - mem["Committed_AS"] if {"CommitLimit", "Committed_AS"} <= set(mem) else None
    return {"cores": os.cpu_count(), "mem_available_kb": mem.get("MemAvailable"),
            "cgroup_memory_limit_kb": cg_limit, "cgroup_memory_room_kb": cg_room,
            "address_space_limit_kb": None if address is None else address // 1024,
            "overcommit": _read_int(Path("/proc/sys/vm/overcommit_memory")), "commit_room_kb": commit,
            "nofile_hard": limit(resource.RLIMIT_NOFILE), "nproc_hard": limit(resource.RLIMIT_NPROC),
            "uid": os.getuid(), "ephemeral_ports": ports}


def needs(devices: int, transport: str = "plain", cores: int = 1) -> dict[str, int]:
    """What a share of ``devices`` needs of each limit (memory in kB: resident in all, address space per fleet
    process with malloc's arenas for ``cores``, committed in all)."""
    per_worker = FD_SETSIZE - OPEN_AT_START - FD_RESERVE
    workers = max(1, math.ceil(devices / per_worker))
    per_process = math.ceil(devices / workers)
    processes = 1 if workers == 1 else workers + 1  # several workers: forked by a parent that runs no device
    device = FLEET_MEMORY[transport]
    arenas = min(ARENAS_PER_CORE * max(1, cores), per_process + 1) - 1  # beyond the main one: a thread's each
    return {"nofile": per_process + OPEN_AT_START + FD_RESERVE, "nproc": devices + THREADS_RESERVE,
            "ports": devices, "processes": processes, "per_process": per_process,
            "resident_kb": devices * device.resident_kb + processes * FLEET_PROCESS.resident_kb,
            "address_kb": per_process * device.address_kb + FLEET_PROCESS.address_kb + arenas * ARENA_KB,
            "commit_kb": devices * device.address_kb + processes * FLEET_PROCESS.resident_kb}


def _limit_problems(share: str, need: dict[str, int], have: dict[str, int | None]) -> list[str]:
    out = []
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


def _memory_problems(share: str, devices: int, transport: str, need: dict[str, int],
                     have: dict[str, int | None]) -> list[str]:
    device, processes = FLEET_MEMORY[transport], need["processes"]
    resident = (f"{need['resident_kb']} kB of memory ({devices} {transport} devices x {device.resident_kb} kB "
                f"resident + {processes} fleet process(es) x {FLEET_PROCESS.resident_kb} kB, from `{FIGURES_FROM}`)")
    out = []
    available, room = have.get("mem_available_kb"), have.get("cgroup_memory_room_kb")
    if available is not None and available < need["resident_kb"]:
        out.append(f"{share} needs {resident}; MemAvailable is {available} kB: free memory there or {HINT}")
    if room is not None and room < need["resident_kb"]:
        out.append(f"{share} needs {resident}; its memory cgroup (limit {have.get('cgroup_memory_limit_kb')} kB) "
                   f"has {room} kB left: raise the limit (docker --memory, MemoryMax=) or {HINT}")
    address = have.get("address_space_limit_kb")
    if address is not None and address < need["address_kb"]:
        out.append(f"{share} needs {need['address_kb']} kB of address space per fleet process ({need['per_process']} "
                   f"devices x {device.address_kb} kB, each thread's 256 KiB stack, + {FLEET_PROCESS.address_kb} kB "
                   f"and malloc's arenas for {have.get('cores') or 1} cores); "
                   f"RLIMIT_AS is {address} kB: raise it (ulimit -v, limits.conf as) or {HINT}")
    commit = have.get("commit_room_kb")
    if have.get("overcommit") == 2 and commit is not None and commit < need["commit_kb"]:
        out.append(f"{share} needs {need['commit_kb']} kB of committed memory ({devices} devices x "
                   f"{device.address_kb} kB, their stacks, + {processes} x {FLEET_PROCESS.resident_kb} kB); "
                   f"vm.overcommit_memory is 2 and CommitLimit less Committed_AS is {commit} kB: {HINT}")
    return out


def problems(host: str, devices: int, have: dict[str, int | None], transport: str = "plain") -> list[str]:
    """One line per limit the share exceeds: the host, the limit, what it needs (and has), the hint."""
    need = needs(devices, transport, have.get("cores") or 1)
    share = f"{host}: its share of {devices} devices"
    return _limit_problems(share, need, have) + _memory_problems(share, devices, transport, need, have)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="capacity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", required=True, help="the inventory's name of this host (named in every refusal)")
    p.add_argument("--devices", type=int, required=True, help="the devices of this host's share")
    p.add_argument("--transport", choices=sorted(FLEET_MEMORY), default="plain",
                   help="the scenario's transport (a TLS device holds more memory)")
    args = p.parse_args(argv)
    have = host_limits()
    for key, value in have.items():
        print(f"{key}={'' if value is None else value}")
    found = problems(args.host, args.devices, have, args.transport)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
