#!/usr/bin/env python3
"""What TLS costs the broker at scale, and what our loader costs beside a paho loader (issue 14, part 4).

1. `testbed run --devices N` for every size x scenario (default 100 and 1,000 devices, plain and tls; 20
   messages each at 1 message/s, connect rate 100/s): the broker-container figures the analysis writes
   (metrics.json ``fleet``): broker CPU per message and per handshake with 95 % intervals, memory per
   connected client, the broker's peak CPU in cores and the verdict on what limited the cell, beside the
   loader's own CPU per message, its schedule lag and the handshake times. Every device and message is
   accounted for (delivered / lost, and where a lost one was last seen on the capture).
2. bench/fleet_loader.py in the same invocation: the loader's CPU per message against a paho-based loader
   on the same schedule, against a Mosquitto on 127.0.0.1 (target: ours <= 0.5 of paho's).

    .venv/bin/python bench/fleet.py [--sizes 100,1000] [--scenarios plain,tls] [--samples 20]
        [--interval 1s] [--connect-rate 100] [--no-loader] [--keep DIR]
    (defaults: about 10 minutes on a 2-core host; needs the images: `testbed images build`)

On a 2-core host the loader shares the CPUs with the broker: read the broker's figures as the broker's only
where the verdict says the broker's CPU was the limit (>= 90 % of a core).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / ".venv" / "bin" / "testbed"


def get(d: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def fmt(v: Any, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def interval(block: Any) -> str:
    """``0.123 [0.110, 0.136]`` (ms per event, 95 % interval over the windows)."""
    if not isinstance(block, dict) or block.get("cpu_ms_per_event") is None:
        return f"n/a ({block.get('reason')})" if isinstance(block, dict) else "n/a"
    return (f"{block['cpu_ms_per_event']:.4f} [{fmt(block.get('ci95_low'), '.4f')}, "
            f"{fmt(block.get('ci95_high'), '.4f')}] over {block.get('windows')} windows")


def run_cell(scenario: str, devices: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    cmd = [str(TESTBED), "run", "--scenario", scenario, "--devices", str(devices), "--connect-rate",
           f"{args.connect_rate:g}", "--samples", str(args.samples), "--interval", args.interval,
           "--payload", str(args.payload), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    cell = json.loads((out / "cell.json").read_text()) if (out / "cell.json").exists() else {}
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    if proc.returncode != 0:
        print(f"  testbed run exited {proc.returncode}: {(cell.get('error') or proc.stderr[-400:]).strip()}")
    return metrics


def print_cell(scenario: str, devices: int, m: dict[str, Any]) -> None:
    f = m.get("fleet") or {}
    b = f.get("broker") or {}
    msgs, lag, setup = f.get("messages") or {}, f.get("schedule_lag_us") or {}, f.get("connection_setup_ms") or {}
    limit, loader = b.get("broker_cpu_limit") or {}, f.get("loader") or {}
    mem = b.get("memory_per_client") or {}
    print(f"\n{scenario} x {devices} devices: connected {fmt(f.get('connected'), 'd')}/{devices}, "
          f"delivered {fmt(msgs.get('delivered'), 'd')}/{fmt(msgs.get('expected'), 'd')}, lost "
          f"{fmt(msgs.get('lost'), 'd')} (accounted on the capture: {msgs.get('lost_accounted')}: "
          f"{msgs.get('lost_at')})")
    print(f"  broker CPU per message   (ms): {interval(b.get('per_message'))}   [{b.get('cpu_source')}]")
    print(f"  broker CPU per handshake (ms): {interval(b.get('per_handshake'))}")
    print(f"  broker memory per client: {fmt(mem.get('bytes_per_client'), '.0f')} B "
          f"({fmt(mem.get('before_bytes'), 'd')} -> {fmt(mem.get('after_bytes'), 'd')} B, {mem.get('source')})")
    print(f"  broker CPU: peak {fmt(limit.get('peak_cores'), '.2f')} cores, steady mean "
          f"{fmt(limit.get('steady_mean_cores'), '.2f')} on {fmt(limit.get('host_cpus'), 'd')} CPUs; "
          f"{b.get('verdict') or limit.get('verdict')}")
    print(f"  loader CPU per message: {fmt(loader.get('cpu_us_per_message'), '.1f')} us (whole run, "
          f"handshakes included), loader CPU {fmt(loader.get('cpu_s'), '.2f')} s, RSS {loader.get('max_rss_kb')} kB")
    print(f"  schedule lag (us): all p50 {fmt(get(lag, 'all.p50'), '.0f')} p99 {fmt(get(lag, 'all.p99'), '.0f')}; "
          f"first send p99 {fmt(get(lag, 'first_send.p99'), '.0f')}; steady p99 "
          f"{fmt(get(lag, 'steady.p99'), '.0f')} max {fmt(get(lag, 'steady.max'), '.0f')}")
    print(f"  set-up (ms): handshake p50 {fmt(get(setup, 'handshake_ms.p50'), '.1f')} p99 "
          f"{fmt(get(setup, 'handshake_ms.p99'), '.1f')}; tcp connect p99 "
          f"{fmt(get(setup, 'tcp_connect_ms.p99'), '.2f')}; one-way delay p50 "
          f"{fmt(get(f, 'one_way_delay_ms.median'), '.3f')} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--scenarios", default="plain,tls")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--connect-rate", type=float, default=100)
    ap.add_argument("--payload", type=int, default=65)
    ap.add_argument("--no-loader", action="store_true", help="skip part 2 (ours vs paho)")
    ap.add_argument("--keep", type=Path, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-fleet-runs-"))
    print(f"part 1: testbed run --devices N ({args.samples} messages/device every {args.interval}, connect rate "
          f"{args.connect_rate:g}/s, {args.payload} B, QoS 0); {os.cpu_count()} CPUs; run folders in {root}")
    try:
        for devices in (int(x) for x in args.sizes.split(",")):
            for scenario in args.scenarios.split(","):
                print_cell(scenario, devices, run_cell(scenario, devices, args, root / f"{scenario}-{devices}"))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.no_loader:
        return 0
    print("\npart 2: the loader's CPU per message, ours (fleet) against a paho loader (bench/fleet_loader.py)")
    sys.stdout.flush()
    transports = ",".join("tls" if s.startswith("tls") else "plain" for s in args.scenarios.split(","))
    interval_ms = float(args.interval[:-2]) if args.interval.endswith("ms") else float(args.interval.rstrip("s")) * 1000
    return subprocess.run([sys.executable, str(REPO / "bench" / "fleet_loader.py"), "--sizes", args.sizes,
                           "--transports", transports, "--samples", str(args.samples), "--interval-ms",
                           f"{interval_ms:g}", "--connect-rate", f"{args.connect_rate:g}", "--tvp-devices", "0"],
                          check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
