"""Benchmark of orchestrator/analysis on a large key-logged TLS capture.

Times (a) our analysis end to end (analyse_run: record walk, ONE tshark pass, tables, metrics),
(b) a bare ``tshark -T fields`` export of the same fields with the same options (decryption
included), (c) pyshark's default per-packet iteration over a slice of the same file, extrapolated
to the whole file (said so in the output). Prints packets/s and the ratios (a)/(b) (goal <= 1.3)
and (c)/(a) (goal >= 50).

Captures:
- the reference capture bench_plain_and_t12chacha.pcap (98,504 packets, both legs, plain + TLS 1.2
  ChaCha20) from $TESTBED_REFERENCE_CAPTURES (default ../shared/reference-captures);
- with ``--record``: a fresh >= 100,000-packet TLS capture made here on loopback only (Mosquitto on
  127.0.0.1, dumpcap on lo, paho publisher + subscriber with key logs, TLS 1.2
  ECDHE-ECDSA-CHACHA20-POLY1305 on a non-standard port). One real session, not copies glued together.

    .venv/bin/python bench/analysis.py [--record] [--repeats 3] [--pyshark-packets 1500]

With ``--fleet`` (instead of the captures above): a ~1,000,000-packet FLEET capture, 1000 virtual ESP32s
(the firmware core's host ``fleet``, built in /tmp/fwb-bench when missing) x 425 messages over TLS 1.2
ECDHE-ECDSA-CHACHA20-POLY1305 to a Mosquitto on 127.0.0.1 (a free port), a paho subscriber, dumpcap on lo;
cached in ~/.cache/testbed-bench/fleet/ (``--re-record`` to record again; recording takes minutes).
Prints (a), (b), (a)/(b) against the target 1.2 and (a)'s PEAK MEMORY against 2 GiB: (a) runs in a child
process whose getrusage max RSS (its own + its largest child's, tshark's) is summed.

    .venv/bin/python bench/analysis.py --fleet --repeats 1 --pyshark-packets 0 [--re-record]

(c) needs pyshark, a bench-only extra: `pip install -e '.[bench]'` (or skip (c) with --pyshark-packets 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.analysis import RunInputs, analyse_run, write_run_outputs  # noqa: E402
from orchestrator.analysis.pcapfile import scan_capture  # noqa: E402
from orchestrator.backends.process import run  # noqa: E402
from orchestrator.backends.tshark import export_chunks, fields_argv, merged_keylog  # noqa: E402
from orchestrator.clients.payload import parse_message, parse_payload  # noqa: E402

RECORD_PORT = 18883
RECORD_SUITE = ("TLS 1.2", 0xCCA9)  # ECDHE-ECDSA-CHACHA20-POLY1305
RECORD_CIPHERS = "ECDHE-ECDSA-CHACHA20-POLY1305"
PYSHARK_MISSING = ("pyshark is not installed; it is only needed for (c), as the `bench` extra: "
                   "pip install -e '.[bench]'   (or skip (c) with --pyshark-packets 0)")


@dataclass(frozen=True)
class Case:
    name: str
    inputs: RunInputs


def reference_dir() -> Path:
    raw = os.environ.get("TESTBED_REFERENCE_CAPTURES")
    return Path(raw) if raw else REPO.parent / "shared" / "reference-captures"


def time_analysis(case: Case) -> tuple[float, float]:
    """(analysis seconds, seconds to write per_message.csv + packets.csv + metrics.json)."""
    t0 = time.perf_counter()
    result = analyse_run(case.inputs, export_chunks)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        write_run_outputs(result, Path(out))
    return t1 - t0, time.perf_counter() - t1


def time_bare_tshark(case: Case) -> float:
    request = case.inputs.export_request()
    with merged_keylog(request.keylogs) as keylog:
        argv = fields_argv(request, keylog)
        t0 = time.perf_counter()
        run(argv, timeout=1800)
        return time.perf_counter() - t0


def time_pyshark(case: Case, packets: int) -> tuple[float, int]:
    """Default FileCapture iteration (PDML/XML) over the first ``packets`` packets."""
    try:
        import pyshark
    except ImportError:
        raise SystemExit(PYSHARK_MISSING) from None

    inp = case.inputs
    with merged_keylog(list(inp.keylogs)) as keylog:
        prefs = {"tls.keylog_file": str(keylog)} if keylog else {}
        decode_as = None
        if inp.tls and inp.broker_port != 8883:  # the same decode-as rules as our pass
            decode_as = {f"tcp.port=={inp.broker_port}": "tls", f"tls.port=={inp.broker_port}": "mqtt"}
        cap = pyshark.FileCapture(str(inp.pcap), override_prefs=prefs, decode_as=decode_as)
        n = 0
        t0 = time.perf_counter()
        try:
            for pkt in cap:
                _ = [layer.layer_name for layer in pkt.layers]  # touch every packet's layers
                n += 1
                if n >= packets:
                    break
        finally:
            cap.close()
        return time.perf_counter() - t0, n


def print_times(case: Case, total: int, repeats: int, a_times: list[float],
                b_times: list[float]) -> tuple[float, float]:
    """The (a) and (b) lines; their medians."""
    a, b = statistics.median(a_times), statistics.median(b_times)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n== {case.name}: {case.inputs.pcap.name}, {total:,} packets, {repeats} repeats; "
          f"load average {load} on {os.cpu_count()} cores")
    print(f"(a) our analysis end to end : median {a:6.2f} s {total / a:9,.0f} packets/s  runs {fmt(a_times)}")
    print(f"(b) bare tshark -T fields   : median {b:6.2f} s {total / b:9,.0f} packets/s  runs {fmt(b_times)}")
    return a, b


def bench(case: Case, repeats: int, pyshark_packets: int) -> dict[str, float]:
    total = scan_capture(case.inputs.pcap).packets
    a_times, b_times, w_times = [], [], []
    for _ in range(repeats):  # interleaved so machine load hits both alike
        b_times.append(time_bare_tshark(case))
        a, w = time_analysis(case)
        a_times.append(a)
        w_times.append(w)
    a, b = print_times(case, total, repeats, a_times, b_times)
    print(f"    (a)/(b) = {a / b:.2f} on medians, {min(a_times) / min(b_times):.2f} on best runs "
          "(goal <= 1.3)")
    print("    writing per_message.csv + packets.csv + metrics.json (not in (a)): "
          f"{statistics.median(w_times):.2f} s")
    out = {"packets": total, "a_s": a, "b_s": b, "a_over_b": a / b}
    if pyshark_packets > 0:
        c_slice, n = time_pyshark(case, pyshark_packets)
        rate = n / c_slice
        c_full = total / rate
        print(f"(c) pyshark default iteration: first {n:,} packets in {c_slice:.2f} s (start-up included) = "
              f"{rate:,.0f} packets/s; EXTRAPOLATED to {total:,} packets: {c_full:,.0f} s")
        print(f"    (c)/(a) = {c_full / a:.0f}   (goal >= 50; (c) extrapolated from a slice)")
        out.update({"c_s_extrapolated": c_full, "c_over_a": c_full / a, "pyshark_pps": rate})
    return out


def fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


# ---------------------------------------------------------------- recording a fresh TLS capture

def json_payload(seq: int, t_us: int, size: int) -> bytes:
    """Our payload format, exactly ``size`` bytes (filler in "x")."""
    base = f'{{"d":"v1","n":{seq},"t":{t_us},"s":[0,{seq % 1024}],"x":""}}'
    if len(base) > size:
        raise SystemExit(f"payload of {size} B too small for {base!r}")
    return (base[:-2] + "x" * (size - len(base)) + '"}').encode()


def wait_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def _broker_config(folder: Path, port: int = RECORD_PORT, extra: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """(mosquitto.conf, CA certificate): TLS 1.2 ChaCha20 only, on 127.0.0.1:``port``."""
    from orchestrator.lab.pki import ensure_pki

    pki = ensure_pki(folder / "pki", "ecdsa-p256")
    conf = folder / "mosquitto.conf"
    conf.write_text("\n".join([
        "user root", f"listener {port} 127.0.0.1", f"cafile {pki.ca_cert}",
        f"certfile {pki.server_cert}", f"keyfile {pki.server_key}", "tls_version tlsv1.2",
        f"ciphers {RECORD_CIPHERS}", "allow_anonymous true", "log_type error", *extra, ""]))
    return conf, pki.ca_cert


def _start_capture(folder: Path, pcap: Path, port: int = RECORD_PORT) -> subprocess.Popen[bytes]:
    """dumpcap on lo (64 MiB kernel buffer: no drops at fleet rates), returned once it writes its file."""
    dumpcap = ["dumpcap", "-q", "-i", "lo", "-B", "64", "-f", f"tcp port {port}", "-w", str(pcap)]
    capture = subprocess.Popen(dumpcap, stdout=subprocess.DEVNULL,
                               stderr=open(folder / "dumpcap.log", "w"))  # noqa: SIM115
    end = time.monotonic() + 10
    while "File:" not in (folder / "dumpcap.log").read_text() and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.5)
    return capture


def _tls_context(ca_cert: Path, keylog: Path) -> ssl.SSLContext:
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.maximum_version = ssl.TLSVersion.TLSv1_2
    c.set_ciphers(RECORD_CIPHERS)
    c.load_verify_locations(cafile=str(ca_cert))
    c.keylog_filename = str(keylog)
    return c


class _Subscriber:
    """A paho subscriber writing our subscriber log; ``got`` is set after ``messages`` messages.

    ``devices``: the log's fifth column names each message's device (the payload's id), as a fleet's needs."""

    def __init__(self, ctx: ssl.SSLContext, log: Path, messages: int, port: int = RECORD_PORT,
                 topic: str = "bench/t", devices: bool = False) -> None:
        import paho.mqtt.client as mqtt

        self.count, self.messages, self.devices = 0, messages, devices
        self.got, subscribed = threading.Event(), threading.Event()
        self.fh = log.open("w", buffering=1)
        self.fh.write("seq,t_recv_us,bytes,dup,device\n" if devices else "seq,t_recv_us,bytes,dup\n")
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-sub")
        self.client.tls_set_context(ctx)
        self.client.on_message = self.on_message
        self.client.on_subscribe = lambda *_a: subscribed.set()
        self.client.on_connect = lambda c, *_a: c.subscribe(topic, qos=0)
        self.client.connect("localhost", port)
        self.client.loop_start()
        if not subscribed.wait(10):
            raise SystemExit("subscriber did not subscribe")

    def on_message(self, _c: object, _u: object, msg: Any) -> None:
        t = time.time_ns() // 1000
        if self.devices:
            got = parse_message(msg.payload)
            device, seq = (got[0], got[1]) if got else ("", -1)
            self.fh.write(f"{seq},{t},{len(msg.payload)},{int(msg.dup)},{device}\n")
        else:
            parsed = parse_payload(msg.payload)
            self.fh.write(f"{parsed[0] if parsed else -1},{t},{len(msg.payload)},{int(msg.dup)}\n")
        self.count += 1
        if self.count >= self.messages:
            self.got.set()


def _publish(ctx: ssl.SSLContext, log: Path, messages: int, rate: float, payload: int) -> Any:
    """Connect a paho publisher and send ``messages`` at ``rate`` per second, logging each send."""
    import paho.mqtt.client as mqtt

    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-pub")
    pub.tls_set_context(ctx)
    connected = threading.Event()
    pub.on_connect = lambda *_a: connected.set()
    pub.connect("localhost", RECORD_PORT)
    pub.loop_start()
    if not connected.wait(10):
        raise SystemExit("publisher did not connect")
    with log.open("w") as pl:
        pl.write("seq,t_send_us,bytes\n")
        t_start = time.perf_counter()
        for seq in range(messages):
            delay = t_start + seq / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t_us = time.time_ns() // 1000
            pub.publish("bench/t", json_payload(seq, t_us, payload), qos=0)
            pl.write(f"{seq},{t_us},{payload}\n")
    return pub


def _clients_session(folder: Path, ca_cert: Path, keys: list[Path], messages: int, rate: float,
                     payload: int) -> int:
    """Subscriber then publisher over TLS; returns how many messages the subscriber got."""
    sub = _Subscriber(_tls_context(ca_cert, keys[1]), folder / "subscriber.csv", messages)
    pub = _publish(_tls_context(ca_cert, keys[0]), folder / "publisher.csv", messages, rate, payload)
    sub.got.wait(60)
    time.sleep(0.5)
    pub.disconnect()
    sub.client.disconnect()
    pub.loop_stop()
    sub.client.loop_stop()
    sub.fh.close()
    time.sleep(0.5)
    return sub.count


def record(folder: Path, messages: int, rate: float, payload: int) -> Case:
    folder.mkdir(parents=True, exist_ok=True)
    conf, ca_cert = _broker_config(folder)
    pcap = folder / "tls_capture.pcapng"
    keys = [folder / "publisher.keys.log", folder / "subscriber.keys.log"]
    for p in [pcap, *keys]:
        p.unlink(missing_ok=True)
    broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                              stderr=open(folder / "mosquitto.log", "w"))  # noqa: SIM115
    capture = None
    try:
        wait_port(RECORD_PORT)
        capture = _start_capture(folder, pcap)
        count = _clients_session(folder, ca_cert, keys, messages, rate, payload)
    finally:
        if capture is not None:
            capture.send_signal(signal.SIGINT)  # dumpcap flushes and closes the file
            capture.wait(30)
        broker.terminate()
        broker.wait(10)
    print(f"recorded {pcap} ({scan_capture(pcap).packets:,} packets); subscriber got {count:,}/{messages:,}")
    return Case("fresh TLS 1.2 ChaCha20 capture (recorded here)", recorded_inputs(folder, messages, payload))


def recorded_inputs(folder: Path, messages: int, payload: int) -> RunInputs:
    """The analysis inputs of a capture made by ``record``."""
    return RunInputs(pcap=folder / "tls_capture.pcapng", broker_port=RECORD_PORT, tls=True,
                     samples_expected=messages, payload_bytes=payload,
                     keylogs=[folder / "publisher.keys.log", folder / "subscriber.keys.log"],
                     publisher_log=folder / "publisher.csv", subscriber_log=folder / "subscriber.csv",
                     expected_tls=RECORD_SUITE)


# ---------------------------------------------------------------- --fleet: a ~1,000,000-packet fleet capture

FLEET_CACHE = Path.home() / ".cache" / "testbed-bench" / "fleet"
FLEET_BUILD = Path("/tmp/fwb-bench")
FLEET_TOPIC = "bench/fleet"
FLEET_CIPHERS_IANA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"  # = RECORD_CIPHERS, the fleet's spelling
FLEET_FILES = ("fleet.pcapng", "fleet.keys.log", "subscriber.keys.log", "subscriber.csv", "fleet.json",
               "devices/summary.json")
FLEET_FORMAT = 2  # of the cache: 2 = the subscriber log names each message's device
RATIO_TARGET = 1.2
MEMORY_TARGET_BYTES = 2 * 1024**3


def _fleet_binary(build: Path) -> Path:
    """The host build's ``fleet`` (N virtual ESP32s on the firmware core), built when missing."""
    exe = build / "fleet"
    if not exe.exists():
        src = REPO / "firmware" / "platformio" / "host"
        print(f"building {exe} ...", flush=True)
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(build), "-j2", "--target", "fleet"], check=True,
                       stdout=subprocess.DEVNULL)
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop one process this script started (and reap it)."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _capinfos_packets(pcap: Path) -> int:
    out = run(["capinfos", "-M", "-c", str(pcap)], timeout=600).stdout
    for line in out.splitlines():
        if "Number of packets" in line:
            return int(line.split(":", 1)[1].strip().replace(",", ""))
    raise SystemExit(f"capinfos printed no packet count for {pcap}:\n{out}")


def _settle(sub: _Subscriber, timeout: float) -> int:
    """Wait for the subscriber's last message (or until its count stops growing)."""
    sub.got.wait(timeout)
    last = -1
    while sub.count != last and not sub.got.is_set():
        last = sub.count
        time.sleep(1.0)
    return sub.count


def record_fleet(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Record a TLS fleet capture on loopback; every process started here is stopped again on any exit."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for name in FLEET_FILES:
        (folder / name).unlink(missing_ok=True)
    devices_dir = folder / "devices"
    if devices_dir.exists():
        for p in devices_dir.iterdir():
            p.unlink()
    exe = _fleet_binary(args.fleet_build)
    port = _free_port()
    conf, ca_cert = _broker_config(folder, port, extra=("max_connections -1", "max_queued_messages 0",
                                                        "persistence false"))
    pcap, keys = folder / "fleet.pcapng", [folder / "fleet.keys.log", folder / "subscriber.keys.log"]
    expected = args.fleet_devices * args.fleet_samples
    broker = capture = fleet = None
    sub: _Subscriber | None = None
    t0 = time.monotonic()
    try:
        broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                  stderr=open(folder / "mosquitto.log", "w"))  # noqa: SIM115
        wait_port(port)
        capture = _start_capture(folder, pcap, port)
        sub = _Subscriber(_tls_context(ca_cert, keys[1]), folder / "subscriber.csv", expected, port,
                          f"{FLEET_TOPIC}/#", devices=True)
        argv = [str(exe), "--devices", str(args.fleet_devices), "--connect-rate", str(args.fleet_connect_rate),
                "--host", "127.0.0.1", "--port", str(port), "--transport", "tls", "--ca", str(ca_cert),
                "--server-name", "localhost", "--ciphers", FLEET_CIPHERS_IANA, "--keylog", str(keys[0]),
                "--payload", str(args.fleet_payload), "--samples", str(args.fleet_samples),
                "--interval-ms", str(args.fleet_interval_ms), "--topic", f"{FLEET_TOPIC}/all",
                "--seed", "1", "--connect-timeout-ms", "30000", "--out-dir", str(devices_dir)]
        schedule = args.fleet_devices / args.fleet_connect_rate + args.fleet_samples * args.fleet_interval_ms / 1e3
        print(f"recording: {args.fleet_devices} TLS devices x {args.fleet_samples} messages every "
              f"{args.fleet_interval_ms:g} ms (about {schedule:.0f} s) to mosquitto on 127.0.0.1:{port} ...",
              flush=True)
        fleet = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(folder / "fleet.log", "w"))  # noqa: SIM115
        rc = fleet.wait(schedule * 3 + 120)
        received = _settle(sub, 60)
        time.sleep(1.0)
    finally:
        _stop(fleet, signal.SIGINT)
        if sub is not None:
            sub.client.disconnect()
            sub.client.loop_stop()
            sub.fh.close()
        time.sleep(0.5)
        _stop(capture, signal.SIGINT)  # dumpcap flushes and closes the file
        _stop(broker)
    seconds = time.monotonic() - t0
    summary = json.loads((devices_dir / "summary.json").read_text())
    if rc != 0:
        print(f"WARNING: fleet exited {rc}: {(folder / 'fleet.log').read_text()[-500:]}")
    sent = int(summary.get("messages_sent", 0))
    failed = sum(1 for line in (devices_dir / "connections.csv").read_text().splitlines()[1:]
                 if line.rstrip().rsplit(",", 1)[-1])
    randoms = sum(1 for line in keys[0].read_text().splitlines() if line.startswith("CLIENT_RANDOM"))
    meta = {"format": FLEET_FORMAT, "port": port, "devices": args.fleet_devices, "samples": args.fleet_samples,
            "interval_ms": args.fleet_interval_ms, "connect_rate": args.fleet_connect_rate,
            "payload": args.fleet_payload, "packets": _capinfos_packets(pcap), "sent": sent, "received": received,
            "fleet_exit": rc, "devices_failed": failed, "keylog_ok": summary.get("keylog_ok"),
            "client_randoms": randoms,
            "record_seconds": round(seconds, 1), "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "dumpcap": (folder / "dumpcap.log").read_text().strip().splitlines()[-1:]}
    (folder / "fleet.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def fleet_case(args: argparse.Namespace) -> Case:
    """The cached fleet capture (recorded when absent, recorded for other sizes, or with --re-record)."""
    import json

    folder = args.fleet_dir
    meta_path = folder / "fleet.json"
    wanted = {"devices": args.fleet_devices, "samples": args.fleet_samples, "interval_ms": args.fleet_interval_ms,
              "payload": args.fleet_payload, "format": FLEET_FORMAT}
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    complete = meta is not None and all((folder / n).exists() for n in FLEET_FILES)
    if args.re_record or not complete or any(meta.get(k) != v for k, v in wanted.items()):  # type: ignore[union-attr]
        meta = record_fleet(folder, args)
        how = f"recorded now in {meta['record_seconds']:.0f} s"
    else:
        how = f"cached, recorded {meta['recorded_utc']} in {meta['record_seconds']:.0f} s"
    print(f"fleet capture {folder / 'fleet.pcapng'} ({how}): {meta['packets']:,} packets (capinfos); "
          f"{meta['devices']} TLS 1.2 ChaCha20 devices x {meta['samples']} messages every {meta['interval_ms']:g} ms; "
          f"{meta.get('devices_failed', 0)} devices failed; sent {meta['sent']:,}, subscriber got "
          f"{meta['received']:,}; fleet key log: "
          f"{meta['client_randoms']} CLIENT_RANDOM lines for {meta['devices']} devices (keylog_ok "
          f"{meta['keylog_ok']}); dumpcap: {' '.join(meta['dumpcap'])}", flush=True)
    inputs = RunInputs(pcap=folder / "fleet.pcapng", broker_port=meta["port"], tls=True,
                       samples_expected=meta["samples"], payload_bytes=meta["payload"],
                       keylogs=[folder / "fleet.keys.log", folder / "subscriber.keys.log"],
                       subscriber_log=folder / "subscriber.csv", expected_tls=RECORD_SUITE,
                       devices=meta["devices"], fleet_dir=folder / "devices")
    return Case(f"fleet capture ({meta['devices']} TLS devices, one subscriber)", inputs)


def _inputs_json(inp: RunInputs) -> str:
    import json

    return json.dumps({"pcap": str(inp.pcap), "broker_port": inp.broker_port, "tls": inp.tls,
                       "samples_expected": inp.samples_expected, "payload_bytes": inp.payload_bytes,
                       "keylogs": [str(p) for p in inp.keylogs],
                       "publisher_log": str(inp.publisher_log) if inp.publisher_log else None,
                       "subscriber_log": str(inp.subscriber_log) if inp.subscriber_log else None,
                       "expected_tls": list(inp.expected_tls) if inp.expected_tls else None,
                       "devices": inp.devices, "fleet_dir": str(inp.fleet_dir) if inp.fleet_dir else None})


def _status_kb(pid: int | str, key: str) -> int:
    """A /proc/<pid>/status figure in KiB (VmRSS: resident now; VmHWM: its peak since the last exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def analysis_child(raw: str) -> int:
    """In a fresh process: analyse_run once, then write its outputs; print seconds and memory (JSON).

    Python's peak is its VmHWM (ru_maxrss is no good here: Linux carries the parent's high-water mark
    over fork + exec, so it starts at the bench process's size); tshark's is polled by the parent.
    """
    import json
    import resource

    d = json.loads(raw)
    inputs = RunInputs(pcap=Path(d["pcap"]), broker_port=d["broker_port"], tls=d["tls"],
                       samples_expected=d["samples_expected"], payload_bytes=d["payload_bytes"],
                       keylogs=[Path(p) for p in d["keylogs"]],
                       publisher_log=Path(d["publisher_log"]) if d["publisher_log"] else None,
                       subscriber_log=Path(d["subscriber_log"]) if d["subscriber_log"] else None,
                       expected_tls=tuple(d["expected_tls"]) if d["expected_tls"] else None,
                       devices=d["devices"], fleet_dir=Path(d["fleet_dir"]) if d["fleet_dir"] else None)
    start_kb = _status_kb("self", "VmHWM")
    t0 = time.perf_counter()
    result = analyse_run(inputs, export_chunks)
    t1 = time.perf_counter()
    self_kb = _status_kb("self", "VmHWM")
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    with tempfile.TemporaryDirectory() as out:
        write_run_outputs(result, Path(out))
    t2 = time.perf_counter()
    print(json.dumps({"analysis_s": t1 - t0, "write_s": t2 - t1, "start_self_kb": start_kb, "self_kb": self_kb,
                      "rusage_children_kb": children_kb, "self_with_write_kb": _status_kb("self", "VmHWM"),
                      "packets": len(result.per_packet), "warnings": [w[:160] for w in result.warnings]}))
    return 0


def _tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return pids


def time_analysis_child(case: Case) -> dict[str, Any]:
    """Our analysis in a child process, its process tree polled every 50 ms: each process's VmHWM
    (tshark's peak, read before it exits) and the tree's summed VmRSS (what is resident at once)."""
    import json

    proc = subprocess.Popen([sys.executable, __file__, "--analysis-child", _inputs_json(case.inputs)],
                            stdout=subprocess.PIPE, text=True)
    hwm: dict[int, tuple[str, int]] = {}
    tree_peak = 0
    try:
        while proc.poll() is None:
            now = 0
            for pid in _tree(proc.pid):
                try:
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                    now += _status_kb(pid, "VmRSS")
                    hwm[pid] = (name, max(hwm.get(pid, ("", 0))[1], _status_kb(pid, "VmHWM")))
                except OSError:
                    pass
            tree_peak = max(tree_peak, now)
            time.sleep(0.05)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        _stop(proc)  # type: ignore[arg-type]
    if proc.returncode != 0:
        raise SystemExit(f"the analysis child failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["polled_tree_kb"] = tree_peak
    res["tshark_kb"] = max((kb for name, kb in hwm.values() if name.startswith("tshark")), default=0)
    return res


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _gib(kb: float) -> str:
    return f"{kb / 1024**2:.2f} GiB"


def bench_fleet(case: Case, repeats: int, pyshark_packets: int) -> None:
    total = scan_capture(case.inputs.pcap).packets
    a_runs: list[dict[str, Any]] = []
    b_times: list[float] = []
    for _ in range(repeats):  # interleaved so machine load hits both alike
        b_times.append(time_bare_tshark(case))
        a_runs.append(time_analysis_child(case))
    a_times = [r["analysis_s"] for r in a_runs]
    a, b = print_times(case, total, repeats, a_times, b_times)
    ratio = a / b
    print(f"    (a)/(b) = {ratio:.2f} on medians, {min(a_times) / min(b_times):.2f} on best runs   "
          f"target <= {RATIO_TARGET}: {_verdict(ratio <= RATIO_TARGET)}")
    worst = max(a_runs, key=lambda r: r["self_kb"] + r["tshark_kb"])
    peak = worst["self_kb"] + worst["tshark_kb"]
    print(f"    peak memory of (a): Python max RSS {_gib(worst['self_kb'])} (of which {_gib(worst['start_self_kb'])} "
          f"before analyse_run) + tshark max RSS {_gib(worst['tshark_kb'])} = {_gib(peak)}   "
          f"target <= 2 GiB: {_verdict(peak * 1024 <= MEMORY_TARGET_BYTES)}")
    print(f"      (VmHWM of each; resident at once, the tree's RSS polled every 50 ms: peak "
          f"{_gib(max(r['polled_tree_kb'] for r in a_runs))}; getrusage RUSAGE_CHILDREN ru_maxrss "
          f"(its largest child) {_gib(worst['rusage_children_kb'])}; "
          f"Python incl. writing the outputs: {_gib(max(r['self_with_write_kb'] for r in a_runs))})")
    print("    writing per_message.csv + packets.csv + metrics.json (not in (a)): "
          f"{statistics.median(r['write_s'] for r in a_runs):.2f} s; analysis warnings: {len(a_runs[0]['warnings'])}")
    for w in a_runs[0]["warnings"]:
        print(f"      - {w}")
    if pyshark_packets > 0:
        c_slice, n = time_pyshark(case, pyshark_packets)
        rate = n / c_slice
        print(f"(c) pyshark default iteration: first {n:,} packets in {c_slice:.2f} s = {rate:,.0f} packets/s; "
              f"EXTRAPOLATED to {total:,} packets: {total / rate:,.0f} s = {total / rate / a:.0f} x (a)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pyshark-packets", type=int, default=1500, help="slice for (c); 0 skips it")
    ap.add_argument("--record", action="store_true",
                    help="also record and time a fresh >=100k-packet capture")
    ap.add_argument("--record-dir", type=Path, default=REPO / ".cache" / "bench-analysis")
    ap.add_argument("--record-messages", type=int, default=30000)
    ap.add_argument("--record-rate", type=float, default=1500.0, help="messages per second")
    ap.add_argument("--reuse", action="store_true", help="reuse an earlier --record capture if present")
    fl = ap.add_argument_group("--fleet: a ~1,000,000-packet capture of N virtual ESP32s (the host `fleet`)")
    fl.add_argument("--fleet", action="store_true",
                    help="time (a), (b) and the peak memory of (a) on the fleet capture only (recorded when "
                         "not cached)")
    fl.add_argument("--re-record", action="store_true", help="record the fleet capture even when cached")
    fl.add_argument("--fleet-dir", type=Path, default=FLEET_CACHE, help="its cache (default %(default)s)")
    fl.add_argument("--fleet-build", type=Path, default=FLEET_BUILD,
                    help="host build folder holding `fleet` (built there when missing; default %(default)s)")
    fl.add_argument("--fleet-devices", type=int, default=1000)
    fl.add_argument("--fleet-samples", type=int, default=425,
                    help="messages per device (2.3 to 2.5 packets each: 425 -> about 1,000,000 packets)")
    fl.add_argument("--fleet-interval-ms", type=float, default=200)
    fl.add_argument("--fleet-connect-rate", type=float, default=40,
                    help="devices started per second (mbedTLS handshakes cost ~30 ms CPU: 200/s timed out on 2 cores)")
    fl.add_argument("--fleet-payload", type=int, default=65)
    ap.add_argument("--analysis-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analysis_child:
        return analysis_child(args.analysis_child)
    if args.pyshark_packets > 0 and importlib.util.find_spec("pyshark") is None:
        raise SystemExit(PYSHARK_MISSING)  # say so before minutes of (a) and (b), not after
    if args.fleet:
        signal.signal(signal.SIGTERM, lambda s, _f: sys.exit(128 + s))  # cleanup runs on SIGTERM too
        bench_fleet(fleet_case(args), args.repeats, args.pyshark_packets)
        return 0
    ref = reference_dir()
    cases = [Case("reference capture (plain + TLS 1.2 ChaCha20, analysed on port 8883)",
                  RunInputs(pcap=ref / "bench_plain_and_t12chacha.pcap", broker_port=8883, tls=True,
                            samples_expected=6250, payload_bytes=100,
                            keylogs=[ref / "bench_plain_and_t12chacha.keys.log"],
                            expected_tls=("TLS 1.2", 0xCCA8)))]
    if args.record:
        folder = args.record_dir
        pcap = folder / "tls_capture.pcapng"
        if args.reuse and pcap.exists():
            cases.append(Case("fresh TLS 1.2 ChaCha20 capture (recorded here earlier)",
                              recorded_inputs(folder, args.record_messages, 65)))
        else:
            cases.append(record(folder, args.record_messages, args.record_rate, 65))
    for case in cases:
        bench(case, args.repeats, args.pyshark_packets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
