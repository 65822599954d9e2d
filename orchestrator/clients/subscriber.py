"""The testbed's MQTT subscriber (paho-mqtt 2.x, CallbackAPIVersion.VERSION2).

Timestamps every message on arrival and writes one line per message, line-buffered, so a crash
loses nothing already received: ``seq,t_recv_us,bytes,dup,device`` (device: the payload's ``d``, empty
for a payload that names none; a fleet's devices share the topic, and (device, seq) is the message's key).
Runs inside the subscriber container; imports only the standard library and paho-mqtt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Literal

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from orchestrator.clients.payload import parse_message

HEADER = "seq,t_recv_us,bytes,dup,device\n"
_DEVICE_OK = re.compile(r"[A-Za-z0-9_.:-]{0,64}")
_DEVICE_BAD_CHAR = re.compile(r"[^A-Za-z0-9_.:-]")


def csv_device(device: str) -> str:
    """The device id as one CSV field of the ASCII log: a character outside [A-Za-z0-9_.:-] becomes ``_``,
    at most 64 of them (our ids are ``v1``, ``f0000``...: the check is all a message normally costs)."""
    if _DEVICE_OK.fullmatch(device):
        return device
    return _DEVICE_BAD_CHAR.sub("_", device)[:64]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed-subscriber", description=__doc__)
    p.add_argument("--host", default="broker")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--topic", default="testbed/sensors")
    p.add_argument("--qos", type=int, choices=(0, 1, 2), default=0)
    p.add_argument("--mqtt", choices=("3.1.1", "5"), default="3.1.1", help="MQTT version of the subscription")
    p.add_argument("--session", choices=("clean", "persistent"), default="clean",
                   help="persistent: the broker keeps the subscription and queues QoS 1/2 messages while the "
                        "connection is lost (3.1.1 Clean Session 0; MQTT 5 Clean Start on the first connection only)")
    p.add_argument("--session-expiry-s", type=int, default=3600, help="MQTT 5, persistent: Session Expiry Interval")
    p.add_argument("--client-id", default="testbed-subscriber")
    p.add_argument("--username")
    p.add_argument("--password-file", help="file holding user:password lines; the --username line is used")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--server-name", default="broker", help="name checked against the broker certificate")
    p.add_argument("--ciphers", default="", help="TLS 1.2 cipher list, OpenSSL names, ':'-separated")
    p.add_argument("--tls-max", choices=("1.2", "1.3"), default="1.2")
    p.add_argument("--keylog", help="write NSS key log lines here (for decrypting the capture)")
    p.add_argument("--out", required=True, help="per-message log (CSV)")
    p.add_argument("--status", help="JSON status file: subscribed flag, counts, negotiated TLS")
    p.add_argument("--transport", choices=("tcp", "websocket"), default="tcp",
                   help="websocket: MQTT over WebSocket (paho's websocket transport, path /mqtt, subprotocol mqtt)")
    p.add_argument("--connect-timeout", type=float, default=30.0)
    return p


def tls_context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2 if args.tls_max == "1.2" else ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cafile=args.ca)
    ctx.check_hostname = True
    if args.ciphers:
        ctx.set_ciphers(args.ciphers)
    if args.cert:
        ctx.load_cert_chain(args.cert, args.key)
    if args.keylog:
        private_file(args.keylog)
        ctx.keylog_filename = args.keylog
    return ctx


def private_file(path: str) -> None:
    """Create ``path`` (or keep it) readable by its owner only: a TLS key log decrypts the capture.
    OpenSSL appends to the file it finds, with the process umask otherwise (0644)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def read_password(path: str, user: str) -> str:
    for line in Path(path).read_text().splitlines():
        name, _, pw = line.partition(":")
        if name == user:
            return pw
    raise SystemExit(f"testbed-subscriber: no password for {user} in {path}")


class Recorder:
    def __init__(self, out: Path, status: Path | None) -> None:
        self.fh = out.open("w", buffering=1, encoding="ascii")  # line-buffered
        self.fh.write(HEADER)
        self.status_path = status
        self.count = 0
        self.unparsed = 0
        self.state: dict[str, object] = {"subscribed": False, "received": 0, "unparsed": 0, "tls": None,
                                         "error": None}
        self.lock = threading.Lock()

    def record(self, payload: bytes, dup: bool) -> None:
        t_recv_us = time.time_ns() // 1000
        parsed = parse_message(payload)
        with self.lock:
            if parsed is None:
                self.unparsed += 1
                return
            device, seq, _t_send = parsed
            self.fh.write(f"{seq},{t_recv_us},{len(payload)},{int(dup)},{csv_device(device)}\n")
            self.count += 1

    def write_status(self, **changes: object) -> None:
        with self.lock:
            self.state.update(changes)
            self.state["received"] = self.count
            self.state["unparsed"] = self.unparsed
            if self.status_path is None:
                return
            tmp = self.status_path.with_name(self.status_path.name + ".tmp")
            tmp.write_text(json.dumps(self.state))
            tmp.replace(self.status_path)

    def close(self) -> None:
        self.fh.close()


def make_client(args: argparse.Namespace, rec: Recorder, stop: threading.Event) -> mqtt.Client:
    """A paho client with our credentials, TLS context and callbacks (status and messages into ``rec``)."""
    transport: Literal["tcp", "websockets"] = "websockets" if args.transport == "websocket" else "tcp"  # paho's
    if args.mqtt == "5":  # MQTT 5 has no clean_session argument: Clean Start is given at connect()
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=args.client_id, protocol=mqtt.MQTTv5,
                             transport=transport)
    else:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=args.client_id,
                             clean_session=args.session == "clean", transport=transport)
    if args.transport == "websocket":
        client.ws_set_options(path="/mqtt")  # the device's path too (websocket.h); Mosquitto serves any
    if args.username:
        pw = read_password(args.password_file, args.username) if args.password_file else None
        client.username_pw_set(args.username, pw)
    if args.tls:
        client.tls_set_context(tls_context(args))
        client.tls_insecure_set(False)

    def on_socket_open(_c, _u, sock) -> None:
        try:
            # paho's websocket wrapper holds the socket
            getattr(sock, "_socket", sock).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass

    def on_connect(c, _u, _flags, reason_code, _props) -> None:
        if reason_code.is_failure:
            rec.write_status(error=f"CONNACK refused: {reason_code}")
            stop.set()
            return
        tls_info = None
        sock = getattr(c.socket(), "_socket", c.socket())  # under paho's websocket wrapper, if any
        if isinstance(sock, ssl.SSLSocket):
            cipher = sock.cipher()
            tls_info = {"version": sock.version(), "cipher": cipher[0] if cipher else None}
        rec.write_status(tls=tls_info)
        c.subscribe(args.topic, qos=args.qos)

    def on_subscribe(_c, _u, _mid, reason_codes, _props) -> None:
        if any(rc.is_failure for rc in reason_codes):
            rec.write_status(error=f"SUBSCRIBE refused: {reason_codes}")
            stop.set()
            return
        rec.write_status(subscribed=True)
        print(f"testbed-subscriber: subscribed to {args.topic}", flush=True)

    def on_message(_c, _u, msg: mqtt.MQTTMessage) -> None:
        rec.record(bytes(msg.payload), bool(msg.dup))

    client.on_socket_open = on_socket_open
    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    return client


def connect(client: mqtt.Client, args: argparse.Namespace, rec: Recorder, stop: threading.Event) -> bool:
    """Connect, retrying until --connect-timeout (the broker may still be starting); False when it never did."""
    deadline = time.monotonic() + args.connect_timeout
    while True:
        try:
            if args.mqtt == "5" and args.session == "persistent":  # a new session, kept across reconnects
                props = Properties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = args.session_expiry_s
                client.connect(args.host, args.port, keepalive=60, clean_start=mqtt.MQTT_CLEAN_START_FIRST_ONLY,
                               properties=props)
            elif args.mqtt == "5":
                client.connect(args.host, args.port, keepalive=60, clean_start=True)
            else:
                client.connect(args.host, args.port, keepalive=60)
            return True
        except (OSError, ssl.SSLError) as exc:
            if time.monotonic() > deadline or stop.is_set():
                rec.write_status(error=f"cannot connect to {args.host}:{args.port}: {exc}")
                print(f"testbed-subscriber: error: cannot connect to {args.host}:{args.port}: {exc}",
                      file=sys.stderr)
                return False
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rec = Recorder(Path(args.out), Path(args.status) if args.status else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    client = make_client(args, rec, stop)
    if not connect(client, args, rec, stop):
        rec.close()
        return 2
    client.loop_start()
    last = -1
    while not stop.wait(0.2):
        if rec.count != last:
            last = rec.count
            rec.write_status()
    client.disconnect()
    client.loop_stop()
    rec.write_status()
    rec.close()
    err = rec.state.get("error")
    if err:
        print(f"testbed-subscriber: error: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
