#!/usr/bin/env python3
"""Events at scale (--events, issue 27 parts 2-3): a sleeping TLS fleet whose broker restarts, or whose links go
down, mid-run; how long the reconnect storm that follows takes to recover and what it costs, counted from the wire.

Two `testbed run` cells (default: 1,000 devices resuming by ticket, K = 5 readings at 1 s, 2 s asleep between
connections, 40 readings each, connect rate 100/s, backoff with full jitter 0.5 s .. 8 s):

- ``restart``: the broker process restarted at 20 s (QoS 0);
- ``link``: every device's link down at 20 s for 5 s, QoS 1 with a persistent session.

For each it prints, from metrics.json ``events`` (analysis/events.py) and tshark's own reading of the capture:
the time from the event to every device connected and publishing again (p50/p99/max); the handshakes before,
during and after the event by kind in the per-connection table beside tshark's count of ClientHellos, broker
Certificates and ServerHellos without one in the same time windows; each device's first connection after the
event (a restart: full on the wire, OpenSSL's ticket keys being the old process's) and the resumption hit rate
after it; the readings lost vs delivered late, per device, and where the capture last saw the lost ones; the
broker's CPU per handshake kind and per reading with 95 % intervals; the loader's CPU and which limit the cell met
(the 90 %-of-a-core rule of analysis/fleetbroker.py).

    .venv/bin/python bench/fleet_events.py [--devices 1000] [--cells restart,link] [--keep DIR]
    (defaults: about 10 minutes on a 2-core host; needs the images: `testbed images build`)
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

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_lifecycle import HS_CERTIFICATE, HS_CLIENT_HELLO, HS_SERVER_HELLO, TESTBED, figure, fmt  # noqa: E402

CELLS = {"restart": ["--events", "broker-restart@20s"],
         "link": ["--events", "link-down@20s:5s", "--qos", "1", "--session", "persistent"]}


def run_cell(name: str, args: argparse.Namespace, out: Path) -> int:
    cmd = [str(TESTBED), "run", "--scenario", "tls", "--devices", str(args.devices), "--connect-rate",
           f"{args.connect_rate:g}", "--samples", str(args.samples), "--interval", args.interval, "--connection",
           "resume-ticket", "--per-connection", str(args.per_connection), "--sleep", args.sleep, "--reconnect",
           "backoff", "--reconnect-base", args.base, "--reconnect-cap", args.cap, *CELLS[name], "--out", str(out)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, check=False)
    if proc.returncode != 0:
        print(f"  testbed run exited {proc.returncode}: {proc.stderr[-600:].strip()}")
    return proc.returncode


def wire_by_stream(run: Path) -> pd.DataFrame:
    """tshark's own reading: per TCP stream its first handshake frame's time, whether the client sent a ClientHello,
    the broker a Certificate, a ServerHello."""
    out = subprocess.run(["tshark", "-r", str(run / "capture" / "capture.pcapng"), "-Y", "tls.handshake.type",
                          "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "tcp.stream", "-e",
                          "frame.time_epoch", "-e", "tcp.dstport", "-e", "tls.handshake.type"],
                         capture_output=True, text=True, check=True, timeout=3600).stdout
    rows: dict[int, dict[str, Any]] = {}
    for line in out.splitlines():
        stream, t, dport, types = line.split("\t")
        kinds = {int(x) for x in types.split(",") if x}
        r = rows.setdefault(int(stream), {"stream": int(stream), "t": float(t), "hello": False, "cert": False,
                                          "server_hello": False})
        if dport == "8883":
            r["hello"] |= HS_CLIENT_HELLO in kinds
        else:
            r["cert"] |= HS_CERTIFICATE in kinds
            r["server_hello"] |= HS_SERVER_HELLO in kinds
    return pd.DataFrame(list(rows.values()))


def window_counts(conns: pd.DataFrame, wire: pd.DataFrame, lo: float, hi: float) -> str:
    """The table's kinds of the connections opened in [lo, hi) beside tshark's counts of their streams."""
    part = conns[(conns["syn_time"] >= lo) & (conns["syn_time"] < hi)]
    w = wire[wire["stream"].isin(part["stream"])]
    table = {str(k): int(v) for k, v in part["handshake"].value_counts().items()}
    return (f"table {table}; tshark: ClientHello {int(w['hello'].sum())}, Certificate {int(w['cert'].sum())}, "
            f"ServerHello without Certificate {int((w['server_hello'] & ~w['cert']).sum())}")


def print_event(ev: dict[str, Any], conns: pd.DataFrame, wire: pd.DataFrame, prev: float, nxt: float) -> None:
    print(f"  {ev['kind']} at {ev['at_s']:g} s (over after {ev['over'] - ev['start']:.3f} s): devices connected again "
          f"{ev['reconnected_s']} (kept their connection: {ev['kept_connection']}), publishing again "
          f"{ev['publishing_s']}, not back: {ev['not_back']}")
    print(f"    before:  {window_counts(conns, wire, prev, ev['start'])}")
    print(f"    during:  {window_counts(conns, wire, ev['start'], ev['over'])}")
    print(f"    after:   {window_counts(conns, wire, ev['over'], nxt)}")
    print(f"    each device's first connection after it: {ev['first_after']} (resumed: "
          f"{fmt(ev['resumption_hit_rate_first_after'], '.3f')}); resumption hit rate before "
          f"{fmt(ev['resumption_hit_rate_before'], '.3f')}, after {fmt(ev['resumption_hit_rate'], '.3f')}")
    m = ev["messages"]
    print(f"    readings sent {m['sent']}: delivered {m['delivered']}, late (> {m['late_ms_threshold']:g} ms at the "
          f"broker) {m['late']} {m['late_uplink_s']}, lost {m['lost']} (not on the capture {m['lost_not_on_capture']}, "
          f"at the broker not forwarded {m['lost_at_broker']}, forwarded not received {m['lost_after_broker']}); "
          f"devices with a loss {m['devices_with_loss']} (most {m['most_lost_by_one_device']}), with a late one "
          f"{m['devices_with_late']} (most {m['most_late_by_one_device']}); subscriber subscribed again after "
          f"{fmt(ev['subscriber_back_s'])} s, lost before that {fmt(ev['lost_before_subscriber_back'], 'd')}")


def print_cell(name: str, run: Path) -> None:
    m = json.loads((run / "metrics.json").read_text())
    conns = pd.read_csv(run / "connections.csv")
    wire = wire_by_stream(run)
    block, b, f = m["events"], m.get("connections") or {}, m.get("fleet") or {}
    print(f"{name}: {b.get('count')} connections on the wire, {block['devices']} devices, handshakes "
          f"{b.get('handshakes')}; devices' claims {b['client_claims']['compared']} compared, "
          f"{len(b['client_claims']['mismatches'])} disagree with the wire")
    events = block["events"]
    for i, ev in enumerate(events):
        prev = events[i - 1]["start"] if i else float(conns["syn_time"].min())
        nxt = events[i + 1]["start"] if i + 1 < len(events) else float("inf")
        print_event(ev, conns, wire, prev, nxt)
    whole = block["messages"]
    drops = block.get("broker_dropped_outgoing") or []
    print(f"  whole cell: sent {whole['sent']}, delivered {whole['delivered']}, late {whole['late']}, lost "
          f"{whole['lost']}; the broker's log: {len(drops)} line(s) of dropped outgoing messages"
          + (f" ({drops[0]})" if drops else ""))
    for source in ("process", "cgroup"):
        kinds = ((m.get("broker_cpu") or {}).get(source) or {}).get("per_handshake_kind") or {}
        if kinds:
            print(f"  broker CPU ({source}): " + "; ".join(f"{k} {figure(v)}" for k, v in
                                                           (kinds.get("handshakes") or {}).items())
                  + f"; per reading {figure(kinds.get('per_reading'))}; {kinds.get('windows')} windows")
    loader, limit = f.get("loader") or {}, (f.get("broker") or {}).get("broker_cpu_limit") or {}
    cores = block["timeline"].get("broker_cores") or {}
    peak = max(cores.get("cores") or [0.0])
    print(f"  loader CPU {fmt(loader.get('cpu_s'), '.1f')} s; broker peak {fmt(limit.get('peak_cores'), '.2f')} "
          f"cores (1-s timeline peak {peak:.2f}); {limit.get('verdict')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--cells", default="restart,link")
    ap.add_argument("--per-connection", type=int, default=5)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--sleep", default="2s")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--connect-rate", type=float, default=100)
    ap.add_argument("--base", default="500ms")
    ap.add_argument("--cap", default="8s")
    ap.add_argument("--keep", type=Path, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-fleet-events-"))
    print(f"{args.devices} TLS devices resuming by ticket, K = {args.per_connection} readings at {args.interval}, "
          f"{args.sleep} asleep, {args.samples} readings each, connect rate {args.connect_rate:g}/s, backoff "
          f"{args.base}..{args.cap}; {os.cpu_count()} CPUs; run folders in {root}")
    failed = 0
    try:
        for name in args.cells.split(","):
            run = root / name
            failed |= run_cell(name, args, run) != 0
            if (run / "metrics.json").exists():
                print_cell(name, run)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
