#!/usr/bin/env python3
"""A sleeping fleet at scale (issue 27 part 1): N TLS devices that wake, connect, publish K readings, disconnect and
sleep, every device resuming its own TLS session, counted from the wire.

One `testbed run` per connection mode (default: 1,000 devices, resume-ticket, K = 5 readings at 1 s, 2 s asleep
between connections, 40 readings per device, connect rate 100/s). For each cell it prints, from the capture:

- connections on the wire against those expected, handshakes by kind (full / resumed-id / resumed-ticket), how
  many reconnections after each device's first were resumed, the verdict, and the devices' own claims checked
  against the wire;
- tshark's own count over the capture (ClientHello, the broker's Certificate messages, ServerHellos without a
  Certificate) beside the table's counts;
- the broker's CPU per handshake of each kind and per reading from the same run, with 95 % intervals
  (metrics.json broker_cpu.<source>.per_handshake_kind: least squares over the stats windows);
- every reading delivered or not, the loader's CPU and the broker's peak CPU, and the verdict on what limited the
  cell (the 90 %-of-a-core rule);
- with --modes persistent,reconnect,... the cost model at this fleet size, as the report solves it
  (orchestrator/report/lifecycle.py): F (bytes per connection, full and resumed) and m (bytes per reading), and the
  bytes per reading F / K + m.

    .venv/bin/python bench/fleet_lifecycle.py [--devices 1000] [--modes resume-ticket] [--per-connection 5]
        [--interval 1s] [--sleep 2s] [--samples 40] [--connect-rate 100] [--keep DIR]
    (defaults: about 5 minutes on a 2-core host; needs the images: `testbed images build`)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / ".venv" / "bin" / "testbed"
HS_CLIENT_HELLO, HS_SERVER_HELLO, HS_CERTIFICATE = 1, 2, 11


def fmt(v: Any, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def figure(block: Any) -> str:
    """``1.234 [1.100, 1.350] ms (n events)``."""
    if not isinstance(block, dict) or block.get("cpu_ms_per_event") is None:
        return "n/a"
    return (f"{block['cpu_ms_per_event']:.3f} [{fmt(block.get('ci95_low'))}, {fmt(block.get('ci95_high'))}] ms"
            + (f" over {block['events']} events" if block.get("events") is not None else ""))


def wire_counts(run: Path, publisher_ips: set[str]) -> dict[str, int]:
    """tshark's own count over the capture, the publisher's connections only."""
    out = subprocess.run(["tshark", "-r", str(run / "capture" / "capture.pcapng"), "-Y", "tls.handshake.type",
                          "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "tcp.stream", "-e",
                          "ip.src", "-e", "ip.dst", "-e", "tls.handshake.type"],
                         capture_output=True, text=True, check=True, timeout=3600).stdout
    hellos, certs, server_hellos = 0, set(), set()
    for line in out.splitlines():
        stream, src, dst, types = line.split("\t")
        kinds = {int(t) for t in types.split(",") if t}
        if src in publisher_ips:
            hellos += HS_CLIENT_HELLO in kinds
        elif dst in publisher_ips:
            certs |= {stream} if HS_CERTIFICATE in kinds else set()
            server_hellos |= {stream} if HS_SERVER_HELLO in kinds else set()
    return {"ClientHello": hellos, "Certificate": len(certs), "ServerHello without Certificate":
            len(server_hellos - certs)}


def publisher_wire(run: Path) -> tuple[float, int, int]:
    """(every frame of the publisher's connections, connections, readings) of a run."""
    m = json.loads((run / "metrics.json").read_text())
    readings = int((m.get("loss") or {}).get("publisher_logged") or 0)
    block = m.get("connections")
    if block:
        return float(block["wire_bytes"]), int(block["count"]), readings
    pk = pd.read_csv(run / "packets.csv", usecols=["frame_len", "leg"])
    devices = int((m.get("fleet") or {}).get("devices") or 1)
    wire = float(pk.loc[pk["leg"].isin(["publisher->broker", "broker->publisher"]), "frame_len"].sum())
    return wire, devices, readings


def print_model(root: Path, modes: list[str], k: int) -> None:
    """F and m from the persistent and the reconnect run (report/lifecycle.py's _model), F resumed from the resume
    runs' resumed connections."""
    from orchestrator.report.lifecycle import _model

    if not {"persistent", "reconnect"} <= set(modes):
        return
    model = _model(publisher_wire(root / "persistent"), publisher_wire(root / "reconnect"))
    if model is None:
        print("\ncost model: n/a (the persistent run does not hold more readings per connection)")
        return
    fixed, m = model
    print(f"\ncost model at this fleet size: full F = {fixed:.0f} B per connection, m = {m:.1f} B per reading; "
          f"at K = {k}: {fixed / k + m:.1f} B per reading (K = 1: {fixed + m:.1f})")
    for mode in (x for x in modes if x.startswith("resume-")):
        block = json.loads((root / mode / "metrics.json").read_text()).get("connections") or {}
        kinds = block.get("by_kind") or {}
        resumed = [v for name, v in kinds.items() if name.startswith("resumed")]
        if resumed:
            f_res = float(resumed[0]["wire_bytes_median"]) - k * m
            print(f"  {mode}: resumed F = {f_res:.0f} B per connection; at K = {k}: {f_res / k + m:.1f} B per reading")


def run_cell(mode: str, args: argparse.Namespace, out: Path) -> int:
    cmd = [str(TESTBED), "run", "--scenario", args.scenario, "--devices", str(args.devices), "--connect-rate",
           f"{args.connect_rate:g}", "--samples", str(args.samples), "--interval", args.interval, "--connection",
           mode, "--per-connection", str(args.per_connection), "--sleep", args.sleep, "--out", str(out)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, check=False)
    if proc.returncode != 0:
        print(f"  testbed run exited {proc.returncode}: {proc.stderr[-600:].strip()}")
    return proc.returncode


def print_cell(mode: str, run: Path) -> None:
    m = json.loads((run / "metrics.json").read_text())
    conns = pd.read_csv(run / "connections.csv")
    b, f = m.get("connections") or {}, m.get("fleet") or {}
    msgs, loader = f.get("messages") or {}, f.get("loader") or {}
    limit = (f.get("broker") or {}).get("broker_cpu_limit") or {}
    print(f"{mode}: {b.get('count')} of {b.get('expected')} connections on the wire ({b.get('devices')} devices), "
          f"handshakes {b.get('handshakes')}")
    print(f"  resumed after each device's first: {b.get('resumed_after_first')} of {b.get('reconnections')}; "
          f"verdict: {b.get('verdict')}; devices' claims: {b['client_claims']['compared']} compared, "
          f"{len(b['client_claims']['mismatches'])} disagree with the wire")
    firsts = conns["device_conn"] == 0
    print(f"  table: {int(firsts.sum())} first connections ({dict(conns.loc[firsts, 'handshake'].value_counts())}), "
          f"later ones {dict(conns.loc[~firsts, 'handshake'].value_counts())}")
    print(f"  tshark over the capture: {wire_counts(run, set(conns['client_ip'].astype(str)))}")
    for source in ("process", "cgroup"):
        cpu = (m.get("broker_cpu") or {}).get(source)
        if not cpu:
            continue
        kinds = cpu.get("per_handshake_kind") or {}
        print(f"  broker CPU ({source}): " + "; ".join(f"{k} {figure(v)}" for k, v in
                                                       (kinds.get("handshakes") or {}).items())
              + f"; per reading {figure(kinds.get('per_reading'))}; idle {figure(kinds.get('idle_ms_per_s'))}/s; "
              f"{kinds.get('windows')} windows {kinds.get('reason') or ''}")
    print(f"  readings delivered {fmt(msgs.get('delivered'), 'd')}/{fmt(msgs.get('expected'), 'd')}, lost "
          f"{fmt(msgs.get('lost'), 'd')}; loader CPU {fmt(loader.get('cpu_s'), '.1f')} s; broker peak "
          f"{fmt(limit.get('peak_cores'), '.2f')} cores; {limit.get('verdict')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--modes", default="resume-ticket")
    ap.add_argument("--scenario", default="tls")
    ap.add_argument("--per-connection", type=int, default=5)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--sleep", default="2s")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--connect-rate", type=float, default=100)
    ap.add_argument("--keep", type=Path, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-fleet-lifecycle-"))
    print(f"{args.devices} {args.scenario} devices, K = {args.per_connection} readings at {args.interval}, "
          f"{args.sleep} asleep between connections, {args.samples} readings each, connect rate "
          f"{args.connect_rate:g}/s; {os.cpu_count()} CPUs; run folders in {root}")
    failed = 0
    modes = args.modes.split(",")
    try:
        for mode in modes:
            run = root / mode
            failed |= run_cell(mode, args, run) != 0
            if (run / "metrics.json").exists() and mode != "persistent":
                print_cell(mode, run)
        if not failed:
            print_model(root, modes, args.per_connection)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
