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
from orchestrator.clients.payload import parse_payload  # noqa: E402

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


def bench(case: Case, repeats: int, pyshark_packets: int) -> dict[str, float]:
    total = scan_capture(case.inputs.pcap).packets
    a_times, b_times, w_times = [], [], []
    for _ in range(repeats):  # interleaved so machine load hits both alike
        b_times.append(time_bare_tshark(case))
        a, w = time_analysis(case)
        a_times.append(a)
        w_times.append(w)
    a, b = statistics.median(a_times), statistics.median(b_times)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n== {case.name}: {case.inputs.pcap.name}, {total:,} packets, {repeats} repeats; "
          f"load average {load} on {os.cpu_count()} cores")
    print(f"(a) our analysis end to end : median {a:6.2f} s {total / a:9,.0f} packets/s  runs {fmt(a_times)}")
    print(f"(b) bare tshark -T fields   : median {b:6.2f} s {total / b:9,.0f} packets/s  runs {fmt(b_times)}")
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


def _broker_config(folder: Path) -> tuple[Path, Path]:
    """(mosquitto.conf, CA certificate): TLS 1.2 ChaCha20 only, on 127.0.0.1:RECORD_PORT."""
    from orchestrator.lab.pki import ensure_pki

    pki = ensure_pki(folder / "pki", "ecdsa-p256")
    conf = folder / "mosquitto.conf"
    conf.write_text("\n".join([
        "user root", f"listener {RECORD_PORT} 127.0.0.1", f"cafile {pki.ca_cert}",
        f"certfile {pki.server_cert}", f"keyfile {pki.server_key}", "tls_version tlsv1.2",
        f"ciphers {RECORD_CIPHERS}", "allow_anonymous true", "log_type error", ""]))
    return conf, pki.ca_cert


def _start_capture(folder: Path, pcap: Path) -> subprocess.Popen[bytes]:
    """dumpcap on lo, returned once it writes its file."""
    dumpcap = ["dumpcap", "-q", "-i", "lo", "-f", f"tcp port {RECORD_PORT}", "-w", str(pcap)]
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
    """A paho subscriber writing our subscriber log; ``got`` is set after ``messages`` messages."""

    def __init__(self, ctx: ssl.SSLContext, log: Path, messages: int) -> None:
        import paho.mqtt.client as mqtt

        self.count, self.messages = 0, messages
        self.got, subscribed = threading.Event(), threading.Event()
        self.fh = log.open("w", buffering=1)
        self.fh.write("seq,t_recv_us,bytes,dup\n")
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-sub")
        self.client.tls_set_context(ctx)
        self.client.on_message = self.on_message
        self.client.on_subscribe = lambda *_a: subscribed.set()
        self.client.on_connect = lambda c, *_a: c.subscribe("bench/t", qos=0)
        self.client.connect("localhost", RECORD_PORT)
        self.client.loop_start()
        if not subscribed.wait(10):
            raise SystemExit("subscriber did not subscribe")

    def on_message(self, _c: object, _u: object, msg: Any) -> None:
        t = time.time_ns() // 1000
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
    args = ap.parse_args()
    if args.pyshark_packets > 0 and importlib.util.find_spec("pyshark") is None:
        raise SystemExit(PYSHARK_MISSING)  # say so before minutes of (a) and (b), not after
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
