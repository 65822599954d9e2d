"""bench/analysis.py --fleet: the ~1.5M-packet fleet capture (1000 virtual ESP32s, the host `fleet`,
over TLS 1.2 ChaCha20 to a Mosquitto on 127.0.0.1), recorded once and cached."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from analysis_record import RECORD_SUITE, Subscriber, broker_config, start_capture, tls_context, wait_port
from analysis_timing import REPO, Case

from orchestrator.analysis import RunInputs
from orchestrator.analysis.keying import DeviceFleet
from orchestrator.backends.process import run

FLEET_CACHE = Path.home() / ".cache" / "testbed-bench" / "fleet"
FLEET_BUILD = Path("/tmp/fwb-bench")
FLEET_TOPIC = "bench/fleet"
FLEET_CIPHERS_IANA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"  # = RECORD_CIPHERS, the fleet's spelling
FLEET_FILES = ("fleet.pcapng", "fleet.keys.log", "subscriber.keys.log", "subscriber.csv", "fleet.json",
               "devices/summary.json")
FLEET_FORMAT = 2  # of the cache: 2 = the subscriber log names each message's device


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


def stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
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


def _settle(sub: Subscriber, timeout: float) -> int:
    """Wait for the subscriber's last message (or until its count stops growing)."""
    sub.got.wait(timeout)
    last = -1
    while sub.count != last and not sub.got.is_set():
        last = sub.count
        time.sleep(1.0)
    return sub.count


def record_fleet(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Record a TLS fleet capture on loopback; every process started here is stopped again on any exit."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FLEET_FILES:
        (folder / name).unlink(missing_ok=True)
    devices_dir = folder / "devices"
    if devices_dir.exists():
        for p in devices_dir.iterdir():
            p.unlink()
    exe = _fleet_binary(args.fleet_build)
    port = _free_port()
    conf, ca_cert = broker_config(folder, port, extra=("max_connections -1", "max_queued_messages 0",
                                                        "persistence false"))
    pcap, keys = folder / "fleet.pcapng", [folder / "fleet.keys.log", folder / "subscriber.keys.log"]
    expected = args.fleet_devices * args.fleet_samples
    broker = capture = fleet = None
    sub: Subscriber | None = None
    t0 = time.monotonic()
    try:
        broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                  stderr=open(folder / "mosquitto.log", "w"))  # noqa: SIM115
        wait_port(port)
        capture = start_capture(folder, pcap, port)
        sub = Subscriber(tls_context(ca_cert, keys[1]), folder / "subscriber.csv", expected, port,
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
        stop(fleet, signal.SIGINT)
        if sub is not None:
            sub.client.disconnect()
            sub.client.loop_stop()
            sub.fh.close()
        time.sleep(0.5)
        stop(capture, signal.SIGINT)  # dumpcap flushes and closes the file
        stop(broker)
    return _fleet_meta(folder, args, port, rc, received, time.monotonic() - t0)


def _fleet_meta(folder: Path, args: argparse.Namespace, port: int, rc: int, received: int,
                seconds: float) -> dict[str, Any]:
    """fleet.json of a fresh recording: what was asked, what the fleet, the subscriber and dumpcap saw."""
    import json

    devices_dir, pcap, keylog = folder / "devices", folder / "fleet.pcapng", folder / "fleet.keys.log"
    summary = json.loads((devices_dir / "summary.json").read_text())
    if rc != 0:
        print(f"WARNING: fleet exited {rc}: {(folder / 'fleet.log').read_text()[-500:]}")
    sent = int(summary.get("messages_sent", 0))
    failed = sum(1 for line in (devices_dir / "connections.csv").read_text().splitlines()[1:]
                 if line.rstrip().rsplit(",", 1)[-1])
    randoms = sum(1 for line in keylog.read_text().splitlines() if line.startswith("CLIENT_RANDOM"))
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
                       keying=DeviceFleet(meta["devices"], folder / "devices"))
    return Case(f"fleet capture ({meta['devices']} TLS devices, one subscriber)", inputs)
