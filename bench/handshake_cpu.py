#!/usr/bin/env python3
"""What a connection costs the BROKER: CPU per reading and per handshake, full vs resumed, at a fixed rate.

Runs one `testbed run` per (scenario, connection mode) with the same readings at the same interval, so
every mode meets the broker at the same event rate (the broker's idle CPU is inside every window: see
orchestrator/analysis/brokercpu.py), and prints metrics.json broker_cpu with the wire figures beside it:
the Mosquitto process's own CPU ("process") and its container's cgroup ("cgroup", which also holds the
healthcheck's execs), over the stats stream's windows, 95 % t interval over the windows. The
persistent baseline sends the same readings over one connection; at this interval it never idles long
enough to send a keepalive PINGREQ, so none is in its figure (a sleeping sensor's would be: see the
report's cost model).

    .venv/bin/python bench/handshake_cpu.py [--readings 1000] [--interval-ms 20] [--scenarios plain,tls]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = ("persistent", "reconnect", "resume-id", "resume-ticket")


def _run(testbed: str, out: Path, scenario: str, mode: str, readings: int, interval_ms: float) -> dict | None:
    argv = [testbed, "run", "--scenario", scenario, "--samples", str(readings), "--interval", f"{interval_ms:g}ms",
            "--connection", mode, "--out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"{scenario} {mode}: failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return json.loads((out / "metrics.json").read_text())


def _fmt(block: dict | None) -> str:
    if not block or block.get("cpu_ms_per_event") is None:
        return "n/a" + (f" ({block.get('reason')})" if block else "")
    ci = (f" [95 % {block['ci95_low']:.3f}, {block['ci95_high']:.3f}]" if block.get("ci95_low") is not None else "")
    return f"{block['cpu_ms_per_event']:.3f} ms{ci} over {block['events']} in {block['windows']} windows"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readings", type=int, default=1000)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--scenarios", default="plain,tls")
    args = ap.parse_args()
    testbed = str(Path(sys.executable).parent / "testbed")
    print(f"{args.readings} readings at {args.interval_ms:g} ms ({1000 / args.interval_ms:g}/s), K = 1")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="bench-handshake-cpu-") as tmp:
        for scenario in args.scenarios.split(","):
            for mode in MODES:
                if scenario == "plain" and mode.startswith("resume-"):
                    continue  # runs as reconnect: nothing to resume
                m = _run(testbed, Path(tmp) / f"{scenario}-{mode}", scenario, mode, args.readings, args.interval_ms)
                if m is None:
                    failed += 1
                    continue
                cpu, conns = m.get("broker_cpu") or {}, m.get("connections") or {}
                for source in ("process", "cgroup"):
                    block = cpu.get(source) or {}
                    print(f"{scenario:6} {mode:14} {source:7} CPU per reading {_fmt(block.get('per_reading'))}")
                if conns:
                    kinds = {k: v["n"] for k, v in (conns.get("by_kind") or {}).items()}
                    print(f"{'':21} handshakes {kinds}; wire {conns.get('wire_bytes_per_reading')} B/reading; "
                          f"TLS handshake median {conns.get('tls_handshake_ms_median')} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
