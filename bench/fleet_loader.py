#!/usr/bin/env python3
"""The fleet loader's own cost: CPU per message of `fleet` (N threads, each the firmware core's unchanged
Publisher) against a paho-mqtt loader in one Python process, and thread-per-device against
process-per-device (N `vdevice` processes), all against a Mosquitto this script starts on 127.0.0.1
(plain, and TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305; stopped again in every case).

Every loader sends the same schedule: device i started at i / rate, a seeded random offset within its first
interval, then S messages of P bytes, QoS 0, one interval apart after its CONNACK. A paho subscriber on the
broker counts what arrived. CPU per message is given two ways:
  total  - the loader's whole CPU (user + sys) over its messages: connects and TLS handshakes included;
           fleet: its summary.json (getrusage), paho: its rusage after the imports, vdevice: the sum of the
           processes' summaries (exec and start-up of each included: that is the cost of a process);
  steady - the CPU of the loader's threads (/proc/<pid>/task/*/schedstat, ns) over a window when every
           device is connected and none has finished, over the messages sent in it: the publish path alone.
The paho loader drives all clients from ONE selector loop (loop_read/loop_write, no thread per client: the
cheapest way to run many paho clients in one process) and shares one SSLContext.

    .venv/bin/python bench/fleet_loader.py [--sizes 100,1000] [--transports plain,tls] [--samples 20]
        [--interval-ms 1000] [--connect-rate 100] [--tvp-devices 100] [--tvp-transport tls] [--no-paho]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MOSQUITTO = "/usr/sbin/mosquitto"
CHACHA_OPENSSL = "ECDHE-ECDSA-CHACHA20-POLY1305"
CHACHA_IANA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"


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
        if self.steady_cpu_s is None or not self.steady_messages:
            return None
        return self.steady_cpu_s * 1e6 / self.steady_messages


# ----------------------------------------------------------------------------------------------- broker
def make_pki(directory: Path) -> dict[str, Path]:
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def cert(cn: str, key, issuer, issuer_key, ca: bool, sans: list) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        now = dt.datetime.now(dt.UTC)
        b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
             .not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(issuer_key or key, hashes.SHA256())

    ca_key, srv_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("fleet bench CA", ca_key, None, None, True, [])
    srv = cert("localhost", srv_key, ca.subject, ca_key, False,
               [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    paths = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(srv_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    for p in paths.values():
        p.chmod(0o644)  # throwaway; readable by the mosquitto user the broker drops to as root
    return paths


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))


def start_broker(directory: Path, pki: dict[str, Path]) -> tuple[subprocess.Popen, int, int, Path]:
    plain, tls = free_port(), free_port()
    conf, log = directory / "mosquitto.conf", directory / "mosquitto.log"
    conf.write_text("\n".join([
        "persistence false", "log_dest stderr", "log_type error", "log_type warning", "max_connections -1",
        f"listener {plain} 127.0.0.1", "allow_anonymous true", f"listener {tls} 127.0.0.1",
        f"cafile {pki['ca']}", f"certfile {pki['cert']}", f"keyfile {pki['key']}", "tls_version tlsv1.2",
        f"ciphers {CHACHA_OPENSSL}", ""]))
    conf.chmod(0o644)
    with log.open("wb") as out:
        proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_raise_nofile)
    import socket

    deadline = time.monotonic() + 10
    for port in (plain, tls):
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"mosquitto did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.05)
    return proc, plain, tls, log


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
def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return pids


def thread_cpu_ns(pids: list[int]) -> dict[tuple[int, str], int]:
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                out[(pid, tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return out


def pss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


class Window:
    """Samples the loader's threads when every device is connected and again before any has finished."""

    def __init__(self, devices: int, args: argparse.Namespace) -> None:
        interval = args.interval_ms / 1000
        self.t1 = devices / args.connect_rate + interval + 1.0
        self.t2 = (args.samples - 1) * interval - 0.5
        self.ok = self.t2 - self.t1 >= 2.0
        self.cpu_s: float | None = None
        self.wall_us = (0, 0)
        self.pss: int | None = None

    def run(self, pids_now, start: float) -> threading.Thread:
        def sample() -> None:
            if not self.ok:
                return
            time.sleep(max(0.0, start + self.t1 - time.monotonic()))
            w1, a = time.time_ns() // 1000, thread_cpu_ns(pids_now())
            time.sleep(max(0.0, start + (self.t1 + self.t2) / 2 - time.monotonic()))
            self.pss = pss_kb(pids_now())
            time.sleep(max(0.0, start + self.t2 - time.monotonic()))
            b, w2 = thread_cpu_ns(pids_now()), time.time_ns() // 1000
            self.cpu_s = sum(v - a[k] for k, v in b.items() if k in a) / 1e9
            self.wall_us = (w1, w2)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        return t

    def count(self, send_times_us) -> int:
        return sum(1 for t in send_times_us if self.wall_us[0] <= t <= self.wall_us[1])


def send_times(csv_path: Path) -> list[int]:
    lines = csv_path.read_text().splitlines()[1:]
    return [int(line.split(",")[1]) for line in lines if line]


def p99(values: list[int]) -> int | None:
    if not values:
        return None
    v = sorted(values)
    return v[max(0, -(-99 * len(v) // 100) - 1)]


# ------------------------------------------------------------------------------------------------ loaders
def run_fleet(ctx: dict, transport: str, devices: int, args: argparse.Namespace, tag: str) -> Result:
    out, topic = ctx["tmp"] / tag, f"bench/fleet/{tag}"
    argv = [str(ctx["build"] / "fleet"), "--devices", str(devices), "--out-dir", str(out), "--host", "127.0.0.1",
            "--topic", topic, "--samples", str(args.samples), "--interval-ms", str(args.interval_ms), "--payload",
            str(args.payload), "--connect-rate", str(args.connect_rate), "--seed", "1"]
    argv += (["--transport", "tls", "--port", str(ctx["tls"]), "--ca", str(ctx["pki"]["ca"]), "--server-name",
              "localhost", "--ciphers", CHACHA_IANA] if transport == "tls" else ["--port", str(ctx["plain"])])
    win, start = Window(devices, args), time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ctx["children"].append(proc)
    sampler = win.run(lambda: tree(proc.pid), start)
    _, stderr = proc.communicate()
    sampler.join()
    r = Result("fleet", transport, devices)
    if proc.returncode != 0:
        r.errors.append(stderr.strip()[-300:])
    s = json.loads((out / "summary.json").read_text())
    r.messages, r.cpu_s, r.peak_rss_kb = s["messages_sent"], s["cpu_user_s"] + s["cpu_sys_s"], s["max_rss_kb"]
    r.processes, r.lag_p99_us = s["processes"], s["schedule_lag_us"]["p99"]
    r.steady_lag_p99_us = s["steady_lag_us"]["p99"]
    r.steady_cpu_s, r.pss_kb = win.cpu_s, win.pss
    if win.cpu_s is not None:
        r.steady_messages = sum(win.count(send_times(p)) for p in out.glob("f*.csv"))
    r.received = ctx["sub"].settled(topic, r.messages)
    shutil.rmtree(out, ignore_errors=True)
    return r


def run_paho(ctx: dict, transport: str, devices: int, args: argparse.Namespace, tag: str) -> Result:
    topic, report = f"bench/fleet/{tag}", ctx["tmp"] / f"{tag}.json"
    cfg = {"port": ctx["tls"] if transport == "tls" else ctx["plain"], "tls": transport == "tls",
           "ca": str(ctx["pki"]["ca"]), "devices": devices, "samples": args.samples,
           "interval_s": args.interval_ms / 1000, "rate": args.connect_rate, "payload": args.payload,
           "topic": topic, "report": str(report)}
    win, start = Window(devices, args), time.monotonic()
    proc = subprocess.Popen([sys.executable, __file__, "--paho-worker", json.dumps(cfg)], stderr=subprocess.PIPE,
                            text=True)
    ctx["children"].append(proc)
    sampler = win.run(lambda: [proc.pid], start)
    _, stderr = proc.communicate()
    sampler.join()
    r = Result("paho", transport, devices)
    if proc.returncode != 0 or not report.exists():
        r.errors.append(stderr.strip()[-300:])
        return r
    w = json.loads(report.read_text())
    r.messages, r.cpu_s, r.peak_rss_kb, r.pss_kb = w["messages"], w["user_s"] + w["sys_s"], w["vmhwm_kb"], win.pss
    r.steady_lag_p99_us, r.errors = p99(w["steady_lag_us"]), w["errors"][:3]
    r.steady_cpu_s = win.cpu_s
    r.steady_messages = win.count(w["send_us"]) if win.cpu_s is not None else 0
    r.received = ctx["sub"].settled(topic, r.messages)
    return r


def run_vdevices(ctx: dict, transport: str, devices: int, args: argparse.Namespace, tag: str) -> Result:
    out, topic = ctx["tmp"] / tag, f"bench/fleet/{tag}"
    out.mkdir()
    rng = random.Random(1)
    win, start = Window(devices, args), time.monotonic()
    procs: list[subprocess.Popen] = []
    sampler = win.run(lambda: [p.pid for p in procs if p.poll() is None], start)
    for i in range(devices):
        time.sleep(max(0.0, start + i / args.connect_rate + rng.random() * args.interval_ms / 1000 - time.monotonic()))
        argv = [str(ctx["build"] / "vdevice"), "--device-id", f"v{i:04d}", "--client-id", f"v{i:04d}", "--host",
                "127.0.0.1", "--topic", topic, "--samples", str(args.samples), "--interval-ms", str(args.interval_ms),
                "--payload", str(args.payload), "--seed", str(i + 1), "--send-log", str(out / f"v{i:04d}.csv"),
                "--summary", str(out / f"v{i:04d}.json")]
        argv += (["--transport", "tls", "--port", str(ctx["tls"]), "--ca", str(ctx["pki"]["ca"]), "--server-name",
                  "localhost", "--ciphers", CHACHA_IANA] if transport == "tls" else ["--port", str(ctx["plain"])])
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        ctx["children"].append(procs[-1])
    r = Result("vdevice", transport, devices, processes=devices)
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            r.errors.append(err.strip()[-200:])
    sampler.join()
    for i in range(devices):
        s = json.loads((out / f"v{i:04d}.json").read_text())
        r.messages += s["messages_sent"]
        r.cpu_s += s["cpu_user_s"] + s["cpu_sys_s"]
        r.peak_rss_kb += s["max_rss_kb"]
        if win.cpu_s is not None:
            r.steady_messages += win.count(send_times(out / f"v{i:04d}.csv"))
    r.steady_cpu_s, r.pss_kb = win.cpu_s, win.pss
    r.received = ctx["sub"].settled(topic, r.messages)
    shutil.rmtree(out, ignore_errors=True)
    return r


# ------------------------------------------------------------------------------------- the paho loader
def _payload(device: str, seq: int, t_us: int, size: int, rng: random.Random) -> bytes:
    """The testbed payload (README "The payload") of exactly `size` bytes."""
    core = (f'{{"d":"{device}","n":{seq},"t":{t_us},"s":[0,{rng.randint(3900, 4000)},{rng.randint(600, 700)},'
            f'{rng.randint(200, 400)}]')
    rest = size - len(core) - 1
    core += f',"x":"{"x" * (rest - 7)}"' if rest >= 7 else " " * rest
    return (core + "}").encode()


def paho_worker(cfg: dict) -> int:
    """N paho clients driven by one selector loop: connect at the slot + offset, publish S messages one
    interval apart after the CONNACK, DISCONNECT. Reports its rusage after the imports."""
    import ssl

    import paho.mqtt.client as mqtt

    ru0, rng = resource.getrusage(resource.RUSAGE_SELF), random.Random(1)
    n, samples, interval = cfg["devices"], cfg["samples"], cfg["interval_s"]
    sel, heap, seq_no = selectors.DefaultSelector(), [], 0
    send_us: list[int] = []
    lag_us: list[int] = []
    errors: list[str] = []
    state = {"done": 0}
    tls_ctx = None
    if cfg["tls"]:
        tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls_ctx.load_verify_locations(cfg["ca"])
        tls_ctx.set_ciphers(CHACHA_OPENSSL)
        tls_ctx.maximum_version = ssl.TLSVersion.TLSv1_2

    def push(due: float, kind: str, i: int, k: int = 0) -> None:
        nonlocal seq_no
        seq_no += 1
        heapq.heappush(heap, (due, seq_no, kind, i, k))

    t_base = time.monotonic() + 0.01
    for i in range(n):
        push(t_base + i / cfg["rate"] + rng.random() * interval, "connect", i)
    clients: dict[int, mqtt.Client] = {}
    t0: dict[int, float] = {}

    def on_connect(c, userdata, flags, rc, props) -> None:
        if rc == 0:
            t0[userdata] = time.monotonic()
            push(t0[userdata], "publish", userdata, 0)
        else:
            errors.append(f"p{userdata:04d}: CONNACK {rc}")
            state["done"] += 1

    def interest(c: mqtt.Client) -> None:
        sock = c.socket()
        if sock is not None:
            sel.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if c.want_write() else 0), c)

    def connect(i: int) -> None:
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"p{i:04d}", userdata=i)
        c.on_connect = on_connect
        c.on_socket_close = lambda client, u, sock: sel.unregister(sock)
        if tls_ctx is not None:
            c.tls_set_context(tls_ctx)
        clients[i] = c
        try:
            c.connect("127.0.0.1", cfg["port"], keepalive=60)  # TCP + TLS handshake (blocking), CONNECT written
            sel.register(c.socket(), selectors.EVENT_READ, c)
            interest(c)
        except (OSError, ValueError) as e:
            errors.append(f"p{i:04d}: {e}")
            state["done"] += 1

    def publish(i: int, k: int) -> None:
        c, due = clients[i], t0[i] + k * interval
        now_us = time.time_ns() // 1000
        if k > 0:  # as fleet's steady lag: lateness after the first message
            lag_us.append(int((time.monotonic() - due) * 1e6))
        c.publish(cfg["topic"], _payload(f"p{i:04d}", k, now_us, cfg["payload"], rng), qos=0)
        send_us.append(now_us)
        if k + 1 < samples:
            push(due + interval, "publish", i, k + 1)
            interest(c)
        else:
            c.disconnect()  # written at once; paho closes the socket after it
            state["done"] += 1

    while state["done"] < n:
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, kind, i, k = heapq.heappop(heap)
            connect(i) if kind == "connect" else publish(i, k)
        timeout = min(0.5, max(0.0, heap[0][0] - time.monotonic())) if heap else 0.5
        for key, mask in sel.select(timeout):
            c = key.data
            if mask & selectors.EVENT_READ:
                c.loop_read()
            if mask & selectors.EVENT_WRITE and c.socket() is not None:
                c.loop_write()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    hwm = next((int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith("VmHWM:")), ru.ru_maxrss)
    Path(cfg["report"]).write_text(json.dumps({
        "user_s": ru.ru_utime - ru0.ru_utime, "sys_s": ru.ru_stime - ru0.ru_stime, "messages": len(send_us),
        "send_us": send_us, "steady_lag_us": lag_us,
        "errors": errors, "vmhwm_kb": hwm}))
    return 0


# --------------------------------------------------------------------------------------------------- main
def fmt(v: float | int | None, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def ensure_build(build: Path) -> None:
    if (build / "fleet").exists() and (build / "vdevice").exists():
        return
    src = REPO / "firmware" / "platformio" / "host"
    for argv in (["cmake", "-S", str(src), "-B", str(build)], ["cmake", "--build", str(build), "-j2"]):
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def print_pair(ours: Result, paho: Result | None) -> None:
    ratio = lambda a, b: fmt(a / b if a is not None and b else None, ".2f")  # noqa: E731
    p = paho or Result("paho", ours.transport, ours.devices)
    print(f"{ours.transport:5} {ours.devices:5} | {fmt(ours.total_us()):>8} {fmt(ours.steady_us()):>7} | "
          f"{fmt(p.total_us()):>8} {fmt(p.steady_us()):>7} | {ratio(ours.total_us(), p.total_us()):>5} "
          f"{ratio(ours.steady_us(), p.steady_us()):>6} | {fmt(ours.lag_p99_us, 'd'):>8} "
          f"{fmt(ours.steady_lag_p99_us, 'd'):>7} {fmt(p.steady_lag_p99_us, 'd'):>7} | "
          f"{ours.received}/{ours.messages} {p.received}/{p.messages} | {ours.processes}")
    for r in (ours, p):
        for e in r.errors[:2]:
            print(f"      {r.loader}: {e}")


def print_tvp(threads: Result, procs: Result) -> None:
    print(f"\nthread-per-device vs process-per-device ({threads.transport}, {threads.devices} devices, the same core "
          "and schedule)\n"
          f"{'':22} {'CPU us/msg total':>16} {'steady':>7} {'peak RSS sum':>13} {'PSS mid-run':>12} {'procs':>6}"
          f" {'delivered':>10}")
    for name, r in (("fleet (threads)", threads), ("vdevice (processes)", procs)):
        print(f"{name:22} {fmt(r.total_us()):>16} {fmt(r.steady_us()):>7} {r.peak_rss_kb:>10} kB "
              f"{fmt(r.pss_kb, 'd'):>9} kB {r.processes:>6} {r.received:>5}/{r.messages}")
    for e in procs.errors[:2]:
        print(f"      vdevice: {e}")


def bench(args: argparse.Namespace, ctx: dict) -> int:
    print(f"{args.samples} messages/device every {args.interval_ms:g} ms, {args.payload} B, QoS 0, connect rate "
          f"{args.connect_rate:g}/s; mosquitto on 127.0.0.1; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print("CPU per message in us (total: whole run incl. connects/handshakes; steady: all devices connected)\n"
          "trans  devs |   fleet  steady |     paho  steady | ratio (fleet/paho) | fleet lag p99 us: sched steady"
          " paho-steady | delivered fleet paho | fleet procs")
    fleet_runs: dict[tuple[str, int], Result] = {}
    for transport in args.transports.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            ours = run_fleet(ctx, transport, n, args, f"fleet-{transport}-{n}")
            fleet_runs[(transport, n)] = ours
            paho = None if args.no_paho else run_paho(ctx, transport, n, args, f"paho-{transport}-{n}")
            print_pair(ours, paho)
    if args.tvp_devices:
        key = (args.tvp_transport, args.tvp_devices)
        threads = fleet_runs.get(key) or run_fleet(ctx, *key, args, f"fleet-tvp-{key[0]}")
        procs = run_vdevices(ctx, *key, args, f"vdevice-{key[0]}-{key[1]}")
        print_tvp(threads, procs)
    return 0


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
    ap.add_argument("--build-dir", type=Path, default=REPO / "build" / "fw-host")
    ap.add_argument("--paho-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.paho_worker:
        return paho_worker(json.loads(args.paho_worker))
    ensure_build(args.build_dir)
    _raise_nofile()
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    tmp.chmod(0o755)
    ctx: dict = {"tmp": tmp, "build": args.build_dir, "children": []}
    broker = None
    try:
        ctx["pki"] = make_pki(tmp)
        broker, ctx["plain"], ctx["tls"], log = start_broker(tmp, ctx["pki"])
        ctx["sub"] = Subscriber(ctx["plain"])
        try:
            return bench(args, ctx)
        finally:
            ctx["sub"].close()
    finally:
        for p in ctx["children"]:
            if p.poll() is None:
                p.kill()
                p.wait()
        if broker is not None and broker.poll() is None:
            broker.terminate()
            try:
                broker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
