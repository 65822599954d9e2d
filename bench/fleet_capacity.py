#!/usr/bin/env python3
"""How many devices one fleet loader carries on this host before the schedule verdict fails (issue 40, part 7).

For every lifecycle x reading interval, fleets of growing size (--sizes, ascending) run against a Mosquitto this
script starts on 127.0.0.1 until the product's own verdict (orchestrator/analysis/fleet.py schedule_lag: more than
1 % of the sends after each device's first over 10 ms late = the loader fell behind) fails; the last size that kept
its schedule is the capacity found. Lifecycles: ``plain`` (one connection per device), ``tls`` (one TLS 1.2
connection per device, ECDHE-ECDSA-CHACHA20-POLY1305), ``tls-full`` (a new connection with a full handshake
every --per-connection readings) and ``tls-ticket`` (the same, resumed by session ticket after each device's
first). Per run: the loader's CPU per reading (its whole CPU, each device's connects included), its peak RSS per
device, and from /proc once every device has sent its first reading (half a second after the last one's slot plus
one interval; the run must last longer: (samples - 1) x interval > devices / connect rate + 1 s, else the sample is
taken half-way) its threads, resident and virtual memory; per device as the slope between the smallest and largest
size (the loader's fixed part cancels).
CPU per connection is solved between lifecycles of one size and interval: cpu(tls-full) - cpu(tls) over the
connections beyond one per device (a reconnect's TCP, MQTT and handshake together); the same for tls-ticket
(resumed ones).

What else ran on the same cores is printed first: Mosquitto (this script's), the paho subscriber that counts the
readings, and whatever else the host runs (its load average is printed before and after). On a shared machine
read the sizes as this machine's at that moment, not the design's.

    .venv/bin/python bench/fleet_capacity.py [--modes plain,tls,tls-full,tls-ticket] [--intervals 1s,10s]
        [--sizes 100,200,400,800] [--samples 8] [--connect-rate 100] [--per-connection 4] [--build-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet_loader import with_bench_lab
from loader_common import CHACHA_IANA, read_proc, tree

from orchestrator.analysis.fleet import schedule_lag
from orchestrator.analysis.logs import read_fleet_logs
from orchestrator.model.axes import parse_interval

REPO = Path(__file__).resolve().parents[1]

LIFECYCLE = {"plain": [], "tls": [], "tls-full": ["--connection", "reconnect"],
             "tls-ticket": ["--connection", "resume-ticket"]}


@dataclass
class Run:
    mode: str
    interval_ms: float
    devices: int
    ok: bool = False
    verdict: str = ""
    error: str = ""
    readings: int = 0
    delivered: int = 0
    connections: int = 0
    resumed: int = 0
    cpu_s: float = 0.0
    max_rss_kb: int = 0
    mid: dict[str, int] = field(default_factory=dict)  # threads, rss_kb, vm_kb of the process tree mid-run
    steady_p99_ms: float | None = None
    late_share: float | None = None

    def per_reading_us(self) -> float | None:
        return self.cpu_s * 1e6 / self.readings if self.readings else None


def proc_status(pids: list[int]) -> dict[str, int]:
    """Threads, VmRSS and VmSize (kB) summed over a process tree."""
    out = {"threads": 0, "rss_kb": 0, "vm_kb": 0}
    keys = {"Threads:": "threads", "VmRSS:": "rss_kb", "VmSize:": "vm_kb"}
    for pid in pids:
        for line in read_proc(f"/proc/{pid}/status").splitlines():
            parts = line.split()
            if parts and parts[0] in keys:
                out[keys[parts[0]]] += int(parts[1])
    return out


def fleet_argv(ctx: dict[str, Any], run: Run, args: argparse.Namespace, out: Path, topic: str) -> list[str]:
    argv = [str(ctx["build"] / "fleet"), "--devices", str(run.devices), "--out-dir", str(out), "--connect-rate",
            f"{args.connect_rate:g}", "--seed", "1", "--topic", topic, "--samples", str(args.samples),
            "--interval-ms", f"{run.interval_ms:g}", "--payload", str(args.payload), "--host", "127.0.0.1"]
    if run.mode == "plain":
        return [*argv, "--port", str(ctx["plain"])]
    argv += ["--transport", "tls", "--port", str(ctx["tls"]), "--ca", str(ctx["ca"]), "--server-name", "localhost",
             "--ciphers", CHACHA_IANA, *LIFECYCLE[run.mode]]
    return [*argv, "--per-connection", str(args.per_connection)] if LIFECYCLE[run.mode] else argv


def sample_midway(pid: int, seconds: float, into: dict[str, int]) -> threading.Thread:
    def at_half() -> None:
        time.sleep(seconds)
        into.update(proc_status(tree(pid)))

    t = threading.Thread(target=at_half, daemon=True)
    t.start()
    return t


def run_one(ctx: dict[str, Any], run: Run, args: argparse.Namespace) -> Run:
    tag = f"{run.mode}-{run.interval_ms:g}ms-{run.devices}"
    out, topic = ctx["tmp"] / tag, f"bench/fleet/{tag}"
    span = run.devices / args.connect_rate + args.samples * run.interval_ms / 1000
    proc = subprocess.Popen(fleet_argv(ctx, run, args, out, topic), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    ctx["children"].append(proc)
    connected = run.devices / args.connect_rate + run.interval_ms / 1000 + 0.5  # every device past its first reading
    sampler = sample_midway(proc.pid, min(connected, span / 2), run.mid)
    _, stderr = proc.communicate()
    sampler.join(timeout=0)
    run.error = stderr.strip()[-300:] if proc.returncode else ""
    s = json.loads((out / "summary.json").read_text())
    run.readings, run.cpu_s, run.max_rss_kb = s["messages_sent"], s["cpu_user_s"] + s["cpu_sys_s"], s["max_rss_kb"]
    run.connections, run.resumed = s["connections"], s["resumed_connections"]
    lag = schedule_lag(read_fleet_logs(out).frame)
    steady = lag.get("steady") or {}
    run.ok = bool(lag.get("loader_kept_schedule")) and not run.error
    run.verdict = str(lag.get("verdict", lag.get("reason", "")))
    run.steady_p99_ms = steady["p99"] / 1000 if steady.get("p99") is not None else None
    run.late_share = steady.get("share_late_10ms")
    run.delivered = ctx["sub"].settled(topic, run.readings)
    shutil.rmtree(out, ignore_errors=True)
    return run


def fmt(v: float | int | None, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def print_run(r: Run) -> None:
    per_dev = (lambda kb: kb / r.devices) if r.devices else (lambda kb: None)
    print(f"{r.mode:10} {r.interval_ms / 1000:5g}s {r.devices:6} | {'kept' if r.ok else 'FELL BEHIND':11} "
          f"steady p99 {fmt(r.steady_p99_ms, '.2f'):>7} ms, {fmt((r.late_share or 0) * 100, '.2f'):>6} % > 10 ms | "
          f"{r.delivered:6}/{r.readings:<6} | CPU {fmt(r.per_reading_us()):>7} us/reading | peak RSS "
          f"{fmt(per_dev(r.max_rss_kb))} kB/dev | mid: {r.mid.get('threads', 0)} threads, RSS "
          f"{fmt(per_dev(r.mid.get('rss_kb', 0)))} kB/dev, VM {fmt(per_dev(r.mid.get('vm_kb', 0)), '.0f')} kB/dev"
          + (f" | error {r.error}" if r.error else ""), flush=True)


def capacity(ctx: dict[str, Any], mode: str, interval_ms: float, args: argparse.Namespace) -> list[Run]:
    """Growing sizes until the verdict fails (that run included)."""
    runs = []
    for n in args.sizes:
        runs.append(run_one(ctx, Run(mode, interval_ms, n), args))
        print_run(runs[-1])
        if not runs[-1].ok:
            break
    return runs


def per_connection_cost(runs: list[Run]) -> None:
    """CPU per connection beyond each device's first, tls-full and tls-ticket against tls of one size/interval."""
    base = {(r.interval_ms, r.devices): r for r in runs if r.mode == "tls"}
    for r in runs:
        b = base.get((r.interval_ms, r.devices))
        extra = r.connections - r.devices
        if r.mode in ("tls-full", "tls-ticket") and b is not None and extra > 0:
            kind = "full handshake" if r.mode == "tls-full" else "ticket resumption"
            print(f"  {r.mode} {r.devices} devices at {r.interval_ms / 1000:g}s: "
                  f"{(r.cpu_s - b.cpu_s) * 1e3 / extra:.3f} ms CPU per reconnect with a {kind} "
                  f"({extra} beyond the first per device; {r.resumed} claimed resumed)")


def memory_slopes(results: list[Run]) -> None:
    """Resident memory per device as the slope between the smallest and largest size of a lifecycle and interval
    (the loader's fixed part cancels), from the mid-run sample; the fixed part as the intercept at 0 devices (per
    fleet process while both sizes run in one; orchestrator/clients/capacity.py FLEET_MEMORY takes these)."""
    for key in sorted({(r.mode, r.interval_ms) for r in results}, key=lambda k: (k[1], list(LIFECYCLE).index(k[0]))):
        runs = [r for r in results if (r.mode, r.interval_ms) == key and r.mid.get("rss_kb")]
        if len(runs) >= 2 and runs[-1].devices > runs[0].devices:
            a, b = runs[0], runs[-1]
            slope = (b.mid["rss_kb"] - a.mid["rss_kb"]) / (b.devices - a.devices)
            vm = (b.mid["vm_kb"] - a.mid["vm_kb"]) / (b.devices - a.devices)
            print(f"  {key[0]:10} at 1 reading / {key[1] / 1000:g} s: {slope:.1f} kB resident and {vm:.0f} kB of "
                  f"address space per device ({a.devices} -> {b.devices} devices); the fixed part "
                  f"{a.mid['rss_kb'] - slope * a.devices:.0f} kB resident, {a.mid['vm_kb'] - vm * a.devices:.0f} kB "
                  "of address space")


def summary(results: list[Run]) -> None:
    print("\ncapacity found (the largest size that kept its schedule; 'above' when the largest asked kept it):")
    for key in sorted({(r.mode, r.interval_ms) for r in results}, key=lambda k: (k[1], list(LIFECYCLE).index(k[0]))):
        runs = [r for r in results if (r.mode, r.interval_ms) == key]
        kept = [r.devices for r in runs if r.ok]
        failed = [r.devices for r in runs if not r.ok]
        found = (f"{max(kept)} devices" if kept else "none of the sizes") + (
            f", fell behind at {failed[0]}" if failed else f" (above: the largest size asked, {runs[-1].devices})")
        print(f"  {key[0]:10} at 1 reading / {key[1] / 1000:g} s: {found}")
    print("\nmemory per device:")
    memory_slopes(results)
    print("\nCPU per connection:")
    per_connection_cost(results)


def environment() -> None:
    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; on the same cores: "
          "this script's Mosquitto (no CPU pinning), its paho subscriber, and whatever else the host runs", flush=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="plain,tls,tls-full,tls-ticket")
    ap.add_argument("--intervals", default="1s,10s", help="reading intervals, e.g. 1s,10s")
    ap.add_argument("--sizes", default="100,200,400,800,1600,3200,6400,10000", help="fleet sizes tried, ascending")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--connect-rate", type=float, default=100)
    ap.add_argument("--per-connection", type=int, default=4)
    ap.add_argument("--payload", type=int, default=65)
    ap.add_argument("--build-dir", type=Path, default=REPO / "build" / "fw-host")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(LIFECYCLE)
    if unknown:
        ap.error(f"--modes: unknown {sorted(unknown)} (of {', '.join(LIFECYCLE)})")
    args.intervals = [parse_interval(x) for x in args.intervals.split(",") if x]
    args.sizes = sorted(int(x) for x in args.sizes.split(",") if x)
    return args


def bench(ctx: dict[str, Any], args: argparse.Namespace) -> None:
    environment()
    print("mode       interval  devs | verdict     steady lag                       | delivered     | loader")
    results: list[Run] = []
    for interval_ms in args.intervals:
        for mode in args.modes:
            results += capacity(ctx, mode, interval_ms, args)
    summary(results)
    environment()


def main() -> int:
    args = parse_args()
    if not (args.build_dir / "fleet").exists():
        src = REPO / "firmware" / "platformio" / "host"
        subprocess.run(["cmake", "-S", str(src), "-B", str(args.build_dir)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(args.build_dir), "-j2", "--target", "fleet"], check=True,
                       stdout=subprocess.DEVNULL)
    with_bench_lab("bench-capacity-", args.build_dir, lambda ctx: bench(ctx, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
