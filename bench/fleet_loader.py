#!/usr/bin/env python3
"""The fleet loader's own cost: CPU per message of `fleet` (N threads, each the firmware core's unchanged
Publisher) against a paho-mqtt loader in one Python process, and thread-per-device against
process-per-device (N `vdevice` processes), all against a Mosquitto this script starts on 127.0.0.1
(plain, and TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305; stopped again in every case).

Every loader sends the same schedule: device i started at i / rate, a seeded random offset within its first
interval, then S messages of P bytes, QoS 0, one interval apart after its CONNACK. A paho subscriber on the
broker counts what arrived ("delivered"). CPU per message, two ways:
  total  - the loader's whole CPU (user + sys) over its messages, connects and TLS handshakes included;
           fleet: its summary.json (getrusage), paho: its rusage after the imports, vdevice: the sum of the
           processes' summaries (each one's exec and start-up included: that is what a process costs);
  steady - the CPU of the loader's threads (/proc/<pid>/task/*/schedstat, ns) in a window when every device
           is connected and none has finished, over the messages sent in it: the publish path alone.
           Needs (samples - 1) x interval - 0.5 s >= devices / rate + interval + 3 s, else "n/a".
The paho loader drives all its clients from ONE selector loop (loop_read/loop_write, no thread per client:
the cheapest way to run many paho clients in one process) and shares one SSLContext.

    .venv/bin/python bench/fleet_loader.py [--sizes 100,1000] [--transports plain,tls] [--samples 20]
        [--interval-ms 1000] [--connect-rate 100] [--tvp-devices 100] [--tvp-transport tls] [--no-paho]
        [--repeat 1]
    (defaults: about 4 minutes; --samples 15 --connect-rate 200: about 2.5 per repeat)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader_common import CHACHA_IANA, CHACHA_OPENSSL, pss_kb, thread_cpu_ns, tree

REPO = Path(__file__).resolve().parents[1]
MOSQUITTO = "/usr/sbin/mosquitto"


@dataclass
class Result:
    loader: str
    transport: str
    devices: int
    messages: int = 0
    received: int = 0
    cpu_s: float = 0.0
    steady_cpu_s: float | None = None
    steady_messages: int = 0
    lag_p99_us: int | None = None
    steady_lag_p99_us: int | None = None
    peak_rss_kb: int = 0
    pss_kb: int | None = None
    processes: int = 1
    errors: list[str] = field(default_factory=list)

    def total_us(self) -> float | None:
        return self.cpu_s * 1e6 / self.messages if self.messages else None

    def steady_us(self) -> float | None:
        ok = self.steady_cpu_s is not None and self.steady_messages
        return self.steady_cpu_s * 1e6 / self.steady_messages if ok else None  # type: ignore[operator]


# ----------------------------------------------------------------------------------------------- broker
def make_pki(d: Path) -> Path:
    """A throwaway CA and an ECDSA P-256 server certificate (DNS:localhost, IP:127.0.0.1); returns the CA."""
    def ossl(*a: str) -> None:
        subprocess.run(["openssl", *a], check=True, capture_output=True)

    ossl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(d / "ca.key"))
    ossl("req", "-x509", "-new", "-key", str(d / "ca.key"), "-subj", "/CN=fleet bench CA", "-days", "1",
         "-out", str(d / "ca.pem"))
    ossl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(d / "server.key"))
    ossl("req", "-new", "-key", str(d / "server.key"), "-subj", "/CN=localhost", "-out", str(d / "server.csr"))
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    ossl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
         "-CAcreateserial", "-days", "1", "-extfile", str(d / "san.ext"), "-out", str(d / "server.pem"))
    for p in d.iterdir():
        p.chmod(0o644)  # throwaway; readable by the mosquitto user the broker drops to as root
    return d / "ca.pem"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))


def start_broker(d: Path) -> tuple[subprocess.Popen, int, int]:
    plain, tls = free_port(), free_port()
    conf, log = d / "mosquitto.conf", d / "mosquitto.log"
    conf.write_text("\n".join([
        "persistence false", "log_dest stderr", "log_type error", "log_type warning", "max_connections -1",
        f"listener {plain} 127.0.0.1", "allow_anonymous true", f"listener {tls} 127.0.0.1", f"cafile {d}/ca.pem",
        f"certfile {d}/server.pem", f"keyfile {d}/server.key", "tls_version tlsv1.2", f"ciphers {CHACHA_OPENSSL}", ""]))
    conf.chmod(0o644)
    with log.open("wb") as out:
        proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=raise_nofile)
    deadline = time.monotonic() + 10
    for port in (plain, tls):
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise SystemExit(f"mosquitto did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.05)
    return proc, plain, tls


class Subscriber:
    """Counts what reached the broker, per topic (each run publishes on its own topic)."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.counts: dict[str, int] = {}
        ready = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fleet-bench-sub")
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe("bench/fleet/#", qos=0)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: ready.set()
        self.client.on_message = lambda c, u, m: self.counts.__setitem__(m.topic, self.counts.get(m.topic, 0) + 1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        if not ready.wait(10):
            raise SystemExit("the bench's subscriber got no SUBACK")

    def settled(self, topic: str, expected: int, timeout: float = 15) -> int:
        deadline, last = time.monotonic() + timeout, -1
        while time.monotonic() < deadline and self.counts.get(topic, 0) < expected:
            time.sleep(0.2)
        while self.counts.get(topic, 0) != last:
            last = self.counts.get(topic, 0)
            time.sleep(0.3)
        return last

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# ------------------------------------------------------------------------------------------ measurement
class Window:
    """Samples the loader's threads once every device is connected and again before any has finished."""

    def __init__(self, devices: int, args: argparse.Namespace) -> None:
        interval = args.interval_ms / 1000
        self.t1 = devices / args.connect_rate + interval + 1.0
        self.t2 = (args.samples - 1) * interval - 0.5
        self.cpu_s: float | None = None
        self.pss: int | None = None
        self.wall_us = (0, 0)
        self.start = time.monotonic()

    def run(self, pids_now) -> threading.Thread:
        def at(t: float) -> None:
            time.sleep(max(0.0, self.start + t - time.monotonic()))

        def sample() -> None:
            if self.t2 - self.t1 < 2.0:
                return
            at(self.t1)
            w1, a = time.time_ns() // 1000, thread_cpu_ns(pids_now())
            at((self.t1 + self.t2) / 2)
            self.pss = pss_kb(pids_now())
            at(self.t2)
            b, w2 = thread_cpu_ns(pids_now()), time.time_ns() // 1000
            self.cpu_s, self.wall_us = sum(v - a[k] for k, v in b.items() if k in a) / 1e9, (w1, w2)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        return t

    def count(self, send_times_us) -> int:
        return sum(1 for t in send_times_us if self.wall_us[0] <= t <= self.wall_us[1]) if self.cpu_s else 0


def send_times(csv_path: Path) -> list[int]:
    return [int(line.split(",")[1]) for line in csv_path.read_text().splitlines()[1:] if line]


def p99(values: list[int]) -> int | None:
    return sorted(values)[max(0, -(-99 * len(values) // 100) - 1)] if values else None


# ------------------------------------------------------------------------------------------------ loaders
def connection_args(ctx: dict, transport: str) -> list[str]:
    if transport != "tls":
        return ["--host", "127.0.0.1", "--port", str(ctx["plain"])]
    return ["--host", "127.0.0.1", "--transport", "tls", "--port", str(ctx["tls"]), "--ca", str(ctx["ca"]),
            "--server-name", "localhost", "--ciphers", CHACHA_IANA]


def schedule_args(args: argparse.Namespace, topic: str) -> list[str]:
    return ["--topic", topic, "--samples", str(args.samples), "--interval-ms", str(args.interval_ms),
            "--payload", str(args.payload)]


def run_fleet(ctx: dict, transport: str, devices: int, args: argparse.Namespace, tag: str) -> Result:
    out, topic = ctx["tmp"] / tag, f"bench/fleet/{tag}"
    argv = [str(ctx["build"] / "fleet"), "--devices", str(devices), "--out-dir", str(out), "--connect-rate",
            str(args.connect_rate), "--seed", "1", *connection_args(ctx, transport), *schedule_args(args, topic)]
    win = Window(devices, args)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ctx["children"].append(proc)
    sampler = win.run(lambda: tree(proc.pid))
    _, stderr = proc.communicate()
    sampler.join()
    r = Result("fleet", transport, devices, errors=[stderr.strip()[-300:]] if proc.returncode else [])
    s = json.loads((out / "summary.json").read_text())
    r.messages, r.cpu_s, r.peak_rss_kb = s["messages_sent"], s["cpu_user_s"] + s["cpu_sys_s"], s["max_rss_kb"]
    r.processes, r.lag_p99_us = s["processes"], s["schedule_lag_us"]["p99"]
    r.steady_lag_p99_us = s["steady_lag_us"]["p99"]
    r.steady_cpu_s, r.pss_kb = win.cpu_s, win.pss
    r.steady_messages = sum(win.count(send_times(p)) for p in out.glob("f*.csv"))
    r.received = ctx["sub"].settled(topic, r.messages)
    shutil.rmtree(out, ignore_errors=True)
    return r


def run_paho(ctx: dict, transport: str, devices: int, args: argparse.Namespace, tag: str) -> Result:
    topic, report = f"bench/fleet/{tag}", ctx["tmp"] / f"{tag}.json"
    cfg = {"port": ctx["tls"] if transport == "tls" else ctx["plain"], "tls": transport == "tls",
           "ca": str(ctx["ca"]), "devices": devices, "samples": args.samples, "interval_s": args.interval_ms / 1000,
           "rate": args.connect_rate, "payload": args.payload, "topic": topic, "report": str(report)}
    win = Window(devices, args)
    proc = subprocess.Popen([sys.executable, __file__, "--paho-worker", json.dumps(cfg)], stderr=subprocess.PIPE,
                            text=True)
    ctx["children"].append(proc)
    sampler = win.run(lambda: [proc.pid])
    _, stderr = proc.communicate()
    sampler.join()
    r = Result("paho", transport, devices)
    if proc.returncode != 0 or not report.exists():
        r.errors.append(stderr.strip()[-300:])
        return r
    w = json.loads(report.read_text())
    r.messages, r.cpu_s, r.peak_rss_kb, r.pss_kb = w["messages"], w["user_s"] + w["sys_s"], w["vmhwm_kb"], win.pss
    r.steady_lag_p99_us, r.errors, r.steady_cpu_s = p99(w["steady_lag_us"]), w["errors"][:3], win.cpu_s
    r.steady_messages = win.count(w["send_us"])
    r.received = ctx["sub"].settled(topic, r.messages)
    return r


def run_vdevices(ctx: dict, transport: str, devices: int, args: argparse.Namespace, tag: str) -> Result:
    out, topic, rng = ctx["tmp"] / tag, f"bench/fleet/{tag}", random.Random(1)
    out.mkdir()
    win = Window(devices, args)
    procs: list[subprocess.Popen] = []
    sampler = win.run(lambda: [p.pid for p in procs if p.poll() is None])
    for i in range(devices):  # started as fleet starts its threads: slot + a random offset in the first interval
        time.sleep(max(0.0, win.start + i / args.connect_rate + rng.random() * args.interval_ms / 1000
                       - time.monotonic()))
        argv = [str(ctx["build"] / "vdevice"), "--device-id", f"v{i:04d}", "--client-id", f"v{i:04d}", "--seed",
                str(i + 1), "--send-log", str(out / f"v{i:04d}.csv"), "--summary", str(out / f"v{i:04d}.json"),
                *connection_args(ctx, transport), *schedule_args(args, topic)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        ctx["children"].append(procs[-1])
    r = Result("vdevice", transport, devices, processes=devices)
    r.errors = [e.strip()[-200:] for p in procs for e in [p.communicate()[1]] if p.returncode]
    sampler.join()
    for i in range(devices):
        s = json.loads((out / f"v{i:04d}.json").read_text())
        r.messages += s["messages_sent"]
        r.cpu_s += s["cpu_user_s"] + s["cpu_sys_s"]
        r.peak_rss_kb += s["max_rss_kb"]
        r.steady_messages += win.count(send_times(out / f"v{i:04d}.csv"))
    r.steady_cpu_s, r.pss_kb = win.cpu_s, win.pss
    r.received = ctx["sub"].settled(topic, r.messages)
    shutil.rmtree(out, ignore_errors=True)
    return r


# ------------------------------------------------------------------------------------- the paho loader
def fmt(v: float | int | None, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def quotient(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratio(a: float | None, b: float | None) -> str:
    return fmt(quotient(a, b), ".2f")


def print_pair(ours: Result, paho: Result | None) -> None:
    p = paho or Result("paho", ours.transport, ours.devices)
    print(f"{ours.transport:5} {ours.devices:5} | {fmt(ours.total_us()):>7} {fmt(ours.steady_us()):>6} | "
          f"{fmt(p.total_us()):>7} {fmt(p.steady_us()):>6} | {ratio(ours.total_us(), p.total_us()):>5} "
          f"{ratio(ours.steady_us(), p.steady_us()):>6} | {fmt(ours.lag_p99_us, 'd'):>7} "
          f"{fmt(ours.steady_lag_p99_us, 'd'):>6} {fmt(p.steady_lag_p99_us, 'd'):>6} | "
          f"{ours.received}/{ours.messages} {p.received}/{p.messages} | {ours.processes}", flush=True)
    for r in (ours, p):
        for e in r.errors[:2]:
            print(f"      {r.loader}: {e}")


def print_tvp(threads: Result, procs: Result) -> None:
    print(f"\nthread-per-device vs process-per-device ({threads.transport}, {threads.devices} devices, the same core "
          f"and schedule)\n{'':20} {'CPU us/msg total':>16} {'steady':>7} {'peak RSS sum':>13} {'PSS mid-run':>12}"
          f" {'procs':>6} {'delivered':>10}")
    for name, r in (("fleet (threads)", threads), ("vdevice (processes)", procs)):
        print(f"{name:20} {fmt(r.total_us()):>16} {fmt(r.steady_us()):>7} {r.peak_rss_kb:>10} kB "
              f"{fmt(r.pss_kb, 'd'):>9} kB {r.processes:>6} {r.received:>5}/{r.messages}")
    for e in procs.errors[:2]:
        print(f"      vdevice: {e}")


def bench(args: argparse.Namespace, ctx: dict) -> None:
    print(f"{args.samples} messages/device every {args.interval_ms:g} ms, {args.payload} B, QoS 0, connect rate "
          f"{args.connect_rate:g}/s; mosquitto on 127.0.0.1; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}\n"
          "CPU per message in us (total: whole run, connects and handshakes included; steady: all connected)\n"
          "trans  devs |   fleet steady |    paho steady | fleet/paho   | fleet lag p99 us: sched steady, "
          "paho steady | delivered fleet paho | fleet procs")
    runs: dict[tuple[str, int], list[tuple[Result, Result | None]]] = {}
    for rep in range(args.repeat):  # the pairs interleaved: a busy host's load hits both loaders alike
        for transport in args.transports.split(","):
            for n in (int(x) for x in args.sizes.split(",")):
                tag = f"{transport}-{n}-{rep}"
                ours = run_fleet(ctx, transport, n, args, f"fleet-{tag}")
                paho = None if args.no_paho else run_paho(ctx, transport, n, args, f"paho-{tag}")
                runs.setdefault((transport, n), []).append((ours, paho))
                print_pair(ours, paho)
    if args.repeat > 1 and not args.no_paho:
        print(f"median over {args.repeat} runs of fleet/paho CPU per message (total, steady):")
        for (transport, n), pairs in runs.items():
            totals = [q for o, p in pairs if p and (q := quotient(o.total_us(), p.total_us())) is not None]
            steadies = [q for o, p in pairs if p and (q := quotient(o.steady_us(), p.steady_us())) is not None]
            print(f"  {transport:5} {n:5}: {fmt(statistics.median(totals) if totals else None, '.2f')} "
                  f"{fmt(statistics.median(steadies) if steadies else None, '.2f')}")
    if args.tvp_devices:
        key = (args.tvp_transport, args.tvp_devices)
        threads = runs[key][0][0] if key in runs else run_fleet(ctx, *key, args, f"fleet-tvp-{key[0]}")
        print_tvp(threads, run_vdevices(ctx, *key, args, f"vdevice-{key[0]}-{key[1]}"))


def with_bench_lab(prefix: str, build_dir: Path, body: Callable[[dict[str, Any]], None]) -> None:
    """Runs ``body(ctx)`` beside a Mosquitto on loopback (plain and TLS ports, a test CA) and one subscriber, in a
    temporary folder; the broker, the folder and every process the body put in ``ctx["children"]`` go after it."""
    raise_nofile()
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    tmp.chmod(0o755)
    ctx: dict[str, Any] = {"tmp": tmp, "build": build_dir, "children": []}
    broker = None
    try:
        ctx["ca"] = make_pki(tmp)
        broker, ctx["plain"], ctx["tls"] = start_broker(tmp)
        ctx["sub"] = Subscriber(ctx["plain"])
        try:
            body(ctx)
        finally:
            ctx["sub"].close()
    finally:
        for p in [*ctx["children"], *([broker] if broker else [])]:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--transports", default="plain,tls")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--interval-ms", type=float, default=1000)
    ap.add_argument("--connect-rate", type=float, default=100)
    ap.add_argument("--payload", type=int, default=65)
    ap.add_argument("--tvp-devices", type=int, default=100, help="thread vs process comparison size (0: skip)")
    ap.add_argument("--tvp-transport", default="tls")
    ap.add_argument("--no-paho", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="run every fleet/paho pair this often (medians printed)")
    ap.add_argument("--build-dir", type=Path, default=REPO / "build" / "fw-host")
    ap.add_argument("--paho-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.paho_worker:
        from paho_loader import paho_worker  # bench/: the same folder

        return paho_worker(json.loads(args.paho_worker))
    if not (args.build_dir / "fleet").exists() or not (args.build_dir / "vdevice").exists():
        src = REPO / "firmware" / "platformio" / "host"
        subprocess.run(["cmake", "-S", str(src), "-B", str(args.build_dir)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(args.build_dir), "-j2"], check=True, stdout=subprocess.DEVNULL)
    with_bench_lab("bench-fleet-", args.build_dir, lambda ctx: bench(args, ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
