#!/usr/bin/env python3
"""Benchmark of testbed-delayline (images/netadmin/delayline/), the userspace delay line for kernels
without sch_netem, in network namespaces this script makes (root; deleted again in every case).

    a [10.96.1.1] <-veth-> [10.96.1.254] r [10.96.2.254] <-veth-> [10.96.2.2] b

Prints, with the targets beside the figures (no pass/fail):
 (i)   the floor: added median and p99 of a UDP round trip a -> b -> a with the line at 0 ms in a's
       mangle POSTROUTING, against no rule (target: median <= 0.2 ms);
 (ii)  packet rate: small UDP packets a -> b through the 0 ms line, paced at rising rates and then
       unpaced; accepted/s and the kernel's drops (target: >= 5,000 packets/s without a drop);
 (iii) bulk TCP (10 MB) through a 5 ms line vs a 0 ms line, both behind the same tbf rate, with the
       line (and tbf) at the sender's egress and at a forwarding hop (r's mangle FORWARD), printing
       the ratio (target >= 80 %), with the line (and tbf) at the sender's egress, at a forwarding hop
       (r's mangle FORWARD) and at the receiver's ingress (b's mangle PREROUTING; tbf on r's egress).
       At the sender, a held packet stays charged to its socket (TCP Small Queues), which can
       throttle the flow; once a packet has crossed a veth it is charged to nobody.

    sudo .venv/bin/python bench/impairment.py [--rate-mbit 20] [--bytes 10000000] [--delay-ms 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "images" / "netadmin" / "delayline"
QUEUE = 9
PORT = 5021
TAG = f"dlb{os.getpid() % 10000}"
NS = {"a": f"{TAG}-a", "r": f"{TAG}-r", "b": f"{TAG}-b"}
IF = {"a": f"{TAG}a", "ra": f"{TAG}ra", "rb": f"{TAG}rb", "b": f"{TAG}b"}
B_IP = "10.96.2.2"

TOOL = Path(__file__).resolve().parents[1] / "images" / "netadmin" / "delayline" / "test" / "traffic.py"


def sh(*argv: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def inside(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", NS[ns], *argv]


@contextmanager
def lab() -> Iterator[None]:
    steps = [*[("netns", "add", n) for n in NS.values()],
             ("link", "add", IF["a"], "type", "veth", "peer", "name", IF["ra"]),
             ("link", "add", IF["b"], "type", "veth", "peer", "name", IF["rb"]),
             ("link", "set", IF["a"], "netns", NS["a"]), ("link", "set", IF["ra"], "netns", NS["r"]),
             ("link", "set", IF["rb"], "netns", NS["r"]), ("link", "set", IF["b"], "netns", NS["b"]),
             ("-n", NS["a"], "addr", "add", "10.96.1.1/24", "dev", IF["a"]),
             ("-n", NS["r"], "addr", "add", "10.96.1.254/24", "dev", IF["ra"]),
             ("-n", NS["r"], "addr", "add", "10.96.2.254/24", "dev", IF["rb"]),
             ("-n", NS["b"], "addr", "add", f"{B_IP}/24", "dev", IF["b"]),
             *[("-n", NS[ns], "link", "set", dev, "up") for ns, dev in
               (("a", IF["a"]), ("r", IF["ra"]), ("r", IF["rb"]), ("b", IF["b"]), ("a", "lo"), ("b", "lo"))],
             ("-n", NS["a"], "route", "add", "default", "via", "10.96.1.254"),
             ("-n", NS["b"], "route", "add", "default", "via", "10.96.2.254")]
    try:
        for step in steps:
            sh("ip", *step)
        sh(*inside("r", "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        for ns in NS:
            sh(*inside(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"))
        yield
    finally:
        for name in NS.values():
            sh("ip", "netns", "del", name, check=False)


PLACES = {  # where the rule and the line sit: namespace, chain and the interface it matches
    "sender": ("a", "POSTROUTING", ["-o", IF["a"]], "a's egress (POSTROUTING -o)"),
    "hop": ("r", "FORWARD", ["-o", IF["rb"]], "r's forwarding towards b (FORWARD -o)"),
    "receiver": ("b", "PREROUTING", ["-i", IF["b"]], "b's ingress (PREROUTING -i)"),
}


def rule_argv(where: str, action: str) -> list[str]:
    """The fail-closed NFQUEUE rule (no --queue-bypass) in the mangle table of `where`."""
    ns, chain, match, _ = PLACES[where]
    return inside(ns, "iptables", "-t", "mangle", action, chain, *match, "-j", "NFQUEUE",
                  "--queue-num", str(QUEUE))


@contextmanager
def delay_line(binary: Path, where: str, work: Path, *args: object) -> Iterator[Path]:
    """The line bound in the namespace of `where` with its rule in place; yields the stats path."""
    ns = PLACES[where][0]
    stats = work / f"stats-{where}-{time.monotonic_ns()}.json"
    proc = subprocess.Popen(inside(ns, str(binary), "--queue", str(QUEUE), "--stats", str(stats),
                                   *map(str, args)), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not stats.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"delay line did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.02)
        sh(*rule_argv(where, "-A"))
        try:
            yield stats
        finally:
            sh(*rule_argv(where, "-D"), check=False)  # rule first, then the line: nothing dropped
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_stats(path: Path) -> dict:
    return json.loads(path.read_text())


@contextmanager
def server(tool: Path, ns: str, *args: object) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(inside(ns, sys.executable, str(tool), *map(str, args)), stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def floor(binary: Path, tool: Path, work: Path, count: int) -> None:
    print(f"(i) floor: {count} sequential UDP round trips a -> b -> a, line at 0 ms in a's POSTROUTING")
    rtt = [sys.executable, str(tool), "rtt", B_IP, str(PORT), str(count)]
    with server(tool, "b", "echo", PORT):
        sh(*inside("a", *rtt[:-1], "200"))  # warm up
        bare = json.loads(sh(*inside("a", *rtt)).stdout)["rtt_ms"]
        with delay_line(binary, "sender", work, "--delay-ms", 0) as stats:
            lined = json.loads(sh(*inside("a", *rtt)).stdout)["rtt_ms"]
            health = read_stats(stats)
    for name, values in (("no rule", bare), ("0 ms line", lined)):
        print(f"    {name:<10} median {statistics.median(values):.3f} ms  p99 {pct(values, 99):.3f} ms  "
              f"({len(values)} of {count} answered)")
    print(f"    added: median {statistics.median(lined) - statistics.median(bare):+.3f} ms "
          f"(target <= 0.2 ms), p99 {pct(lined, 99) - pct(bare, 99):+.3f} ms; line healthy: {health['healthy']}")


def rate(binary: Path, tool: Path, work: Path, seconds: float, steps: list[int]) -> None:
    print(f"(ii) packet rate: 60-byte UDP packets a -> b for {seconds:g} s each, line at 0 ms")
    best = 0.0
    with delay_line(binary, "sender", work, "--delay-ms", 0) as stats:
        for pps in [*steps, 0]:
            before = read_stats(stats)
            out = json.loads(sh(*inside("a", sys.executable, str(tool), "flood", B_IP, str(PORT),
                                        str(seconds), str(pps))).stdout)
            time.sleep(0.5)  # the line releases the rest and writes its stats
            after = read_stats(stats)
            accepted = after["accepted"] - before["accepted"]
            kdrop = sum(after["kernel"][k] - before["kernel"][k] for k in ("queue_dropped", "user_dropped"))
            enobufs = after["overflows"] - before["overflows"]
            per_s = accepted / out["seconds"]
            label = f"{pps:>6} pps offered" if pps else "   unpaced flood"
            print(f"    {label}: sent {out['sent'] / out['seconds']:8.0f}/s, accepted {per_s:8.0f}/s, "
                  f"kernel queue drops {kdrop}, ENOBUFS {enobufs}, max held {after['max_in_flight']}")
            if kdrop == 0 and enobufs == 0 and accepted == out["sent"]:
                best = max(best, per_s)
    print(f"    sustained without a drop: {best:.0f} packets/s (target >= 5,000)")


def bulk(tool: Path, nbytes: int) -> float:
    with server(tool, "b", "sink", PORT + 1) as sink:
        sh(*inside("a", sys.executable, str(tool), "bulk", B_IP, str(PORT + 1), str(nbytes)))
        out, _ = sink.communicate(timeout=300)
    result = json.loads(out)
    return result["bytes"] * 8 / result["seconds"] / 1e6


def tbf(where: str, action: str, rate_mbit: int) -> None:
    ns, dev = ("a", IF["a"]) if where == "sender" else ("r", IF["rb"])  # "receiver": r's egress too
    argv = ["tc", "qdisc", action, "dev", dev, "root"]
    if action == "add":
        argv += ["tbf", "rate", f"{rate_mbit}mbit", "burst", "32kb", "latency", "50ms"]
    sh(*inside(ns, *argv), check=action == "add")


def tcp(binary: Path, tool: Path, work: Path, nbytes: int, rate_mbit: int, delay_ms: float) -> None:
    print(f"(iii) bulk TCP, {nbytes / 1e6:g} MB a -> b, tbf {rate_mbit} Mbit/s and the line on one egress")
    for where, (_, _, _, place) in PLACES.items():
        tbf(where, "add", rate_mbit)
        try:
            figures, health = {}, {}
            for d in (0.0, delay_ms):
                with delay_line(binary, where, work, "--delay-ms", d) as stats:
                    figures[d] = bulk(tool, nbytes)
                    health[d] = read_stats(stats)
        finally:
            tbf(where, "del", rate_mbit)
        ratio = figures[delay_ms] / figures[0.0]
        print(f"    at {place}: 0 ms {figures[0.0]:.2f} Mbit/s, {delay_ms:g} ms {figures[delay_ms]:.2f} Mbit/s: "
              f"ratio {100 * ratio:.1f} % (target >= 80 %); max held {health[delay_ms]['max_in_flight']}, "
              f"healthy {health[0.0]['healthy'] and health[delay_ms]['healthy']}")
        if ratio < 0.8 and where == "sender":
            print("      throttled: TCP Small Queues. A packet held at the sender's own egress stays charged to "
                  "its socket, so TCP stops queueing more; place the line at a forwarding hop instead.")
        elif ratio < 0.8:
            print("      below the target here too: not TSQ (the packets crossed a veth); look at the line's stats")


def build(work: Path) -> Path:
    out = sh("make", "-C", str(SOURCE), f"BUILD_DIR={work / 'build'}", check=False)
    if out.returncode != 0:
        raise RuntimeError(f"make failed:\n{out.stdout}{out.stderr}")
    return work / "build" / "testbed-delayline"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate-mbit", type=int, default=20)
    ap.add_argument("--bytes", type=int, default=10_000_000)
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--round-trips", type=int, default=5000)
    ap.add_argument("--flood-seconds", type=float, default=3.0)
    ap.add_argument("--rates", default="5000,10000,20000,40000", help="paced packet rates to offer")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/impairment.py needs root (network namespaces, iptables)", file=sys.stderr)
        return 2
    # SIGTERM (a killed bench) unwinds like Ctrl-C, so the namespaces and the line are always removed
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="bench-delayline-") as tmp:
        work = Path(tmp)
        binary = build(work)
        tool = TOOL
        print(f"testbed-delayline built in {binary.parent}; kernel {os.uname().release}, {os.cpu_count()} CPUs")
        with lab():
            floor(binary, tool, work, args.round_trips)
            rate(binary, tool, work, args.flood_seconds, [int(x) for x in args.rates.split(",") if x])
            tcp(binary, tool, work, args.bytes, args.rate_mbit, args.delay_ms)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: namespaces and the line removed", file=sys.stderr)
        sys.exit(130)
