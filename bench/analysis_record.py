"""bench/analysis.py --record: a fresh TLS 1.2 ChaCha20 capture made here on loopback (Mosquitto on
127.0.0.1, dumpcap on lo, paho publisher + subscriber with key logs); its broker, capture and subscriber are
also the fleet recording's."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from analysis_timing import Case

from orchestrator.analysis import RunInputs
from orchestrator.analysis.pcapfile import scan_capture
from orchestrator.clients.payload import parse_message, parse_payload

RECORD_PORT = 18883
RECORD_SUITE = ("TLS 1.2", 0xCCA9)  # ECDHE-ECDSA-CHACHA20-POLY1305
RECORD_CIPHERS = "ECDHE-ECDSA-CHACHA20-POLY1305"


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


def broker_config(folder: Path, port: int = RECORD_PORT, extra: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """(mosquitto.conf, CA certificate): TLS 1.2 ChaCha20 only, on 127.0.0.1:``port``."""
    from orchestrator.lab.pki import ensure_pki

    pki = ensure_pki(folder / "pki", "ecdsa-p256")
    conf = folder / "mosquitto.conf"
    conf.write_text("\n".join([
        "user root", f"listener {port} 127.0.0.1", f"cafile {pki.ca_cert}",
        f"certfile {pki.server_cert}", f"keyfile {pki.server_key}", "tls_version tlsv1.2",
        f"ciphers {RECORD_CIPHERS}", "allow_anonymous true", "log_type error", *extra, ""]))
    return conf, pki.ca_cert


def start_capture(folder: Path, pcap: Path, port: int = RECORD_PORT) -> subprocess.Popen[bytes]:
    """dumpcap on lo (64 MiB kernel buffer: no drops at fleet rates), returned once it writes its file."""
    dumpcap = ["dumpcap", "-q", "-i", "lo", "-B", "64", "-f", f"tcp port {port}", "-w", str(pcap)]
    capture = subprocess.Popen(dumpcap, stdout=subprocess.DEVNULL,
                               stderr=open(folder / "dumpcap.log", "w"))  # noqa: SIM115
    end = time.monotonic() + 10
    while "File:" not in (folder / "dumpcap.log").read_text() and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.5)
    return capture


def tls_context(ca_cert: Path, keylog: Path) -> ssl.SSLContext:
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.maximum_version = ssl.TLSVersion.TLSv1_2
    c.set_ciphers(RECORD_CIPHERS)
    c.load_verify_locations(cafile=str(ca_cert))
    c.keylog_filename = str(keylog)
    return c


class Subscriber:
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
    sub = Subscriber(tls_context(ca_cert, keys[1]), folder / "subscriber.csv", messages)
    pub = _publish(tls_context(ca_cert, keys[0]), folder / "publisher.csv", messages, rate, payload)
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
    conf, ca_cert = broker_config(folder)
    pcap = folder / "tls_capture.pcapng"
    keys = [folder / "publisher.keys.log", folder / "subscriber.keys.log"]
    for p in [pcap, *keys]:
        p.unlink(missing_ok=True)
    broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                              stderr=open(folder / "mosquitto.log", "w"))  # noqa: SIM115
    capture = None
    try:
        wait_port(RECORD_PORT)
        capture = start_capture(folder, pcap)
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
