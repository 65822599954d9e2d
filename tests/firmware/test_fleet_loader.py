"""The fleet loader (firmware/platformio/host/src/fleet/fleet_*.cpp): N virtual devices, each the core's unchanged
Publisher in its own thread, against a real Mosquitto 2.0 (plain, and TLS 1.2 ECDHE-ECDSA-CHACHA20-POLY1305).

What the fleet claims (its send logs, connections.csv, summary.json) is checked against an independent
reader: a paho subscriber on the broker's plain listener sees every message, with the device id, sequence
number and send time the fleet logged.
"""

from __future__ import annotations

import csv
import json
import re
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from fwtest_support import Broker, HostBuild, Pki

CHACHA_OPENSSL = "ECDHE-ECDSA-CHACHA20-POLY1305"
CHACHA_IANA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
TOPIC = "testbed/fleet"
SEND_HEADER = ["seq", "t_send_us", "bytes", "t_intended_us"]
CONN_HEADER = ["device", "t_start_us", "tcp_connect_ms", "handshake_ms", "connack_ms", "messages", "error"]
SUMMARY_KEYS = {"devices", "connected", "failed", "failed_devices", "messages_sent", "schedule_lag_us",
                "steady_lag_us", "cpu_user_s", "cpu_sys_s", "cpu_us_per_message", "max_rss_kb", "processes",
                "interrupted"}


class Subscriber:
    """paho-mqtt on the broker's plain listener: what really reached the broker, as (d, n) -> t."""

    def __init__(self, port: int) -> None:
        self.messages: dict[tuple[str, int], int] = {}
        self.duplicates = 0
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"fw-fleet-sub-{port}")
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(TOPIC, qos=0)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert subscribed.wait(10), "subscriber did not get SUBACK"

    def _on_message(self, client: mqtt.Client, userdata: object, msg: mqtt.MQTTMessage) -> None:
        body = json.loads(msg.payload)
        with self._lock:
            key = (body["d"], int(body["n"]))
            self.duplicates += key in self.messages
            self.messages[key] = int(body["t"])

    def wait_for(self, count: int, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.messages)

    def settle(self, quiet: float = 0.5, timeout: float = 10) -> int:
        """Waits until no message arrived for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        last = -1
        while time.monotonic() < deadline and len(self.messages) != last:
            last = len(self.messages)
            time.sleep(quiet)
        return len(self.messages)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _fleet_argv(build: HostBuild, pki: Pki, broker: Broker, out: Path, transport: str, *extra: str) -> list[str]:
    argv = [str(build.build_dir / "fleet"), "--host", "127.0.0.1", "--topic", TOPIC, "--out-dir", str(out),
            "--payload", "65"]
    if transport == "tls":
        argv += ["--transport", "tls", "--port", str(broker.tls_port), "--ca", str(pki.ca), "--server-name",
                 "localhost", "--ciphers", CHACHA_IANA, "--keylog", str(out / "keys.log")]
    else:
        argv += ["--transport", "plain", "--port", str(broker.plain_port)]
    return argv + list(extra)


def _send_log(path: Path) -> list[dict[str, int]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == SEND_HEADER, path
        return [{k: int(v) for k, v in row.items()} for row in reader]


def _connections(out: Path) -> list[dict[str, str]]:
    with (out / "connections.csv").open() as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == CONN_HEADER
        return list(reader)


@pytest.mark.parametrize("transport", ["plain", "tls"])
def test_fleet_50_devices(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path, transport: str) -> None:
    """50 devices x 5 messages at 100 ms, 200 devices/s: all connect, the broker gets all 250, logs agree."""
    broker = broker_factory(CHACHA_OPENSSL)
    out = tmp_path / "fleet"
    subscriber = Subscriber(broker.plain_port)
    try:
        proc = subprocess.run(_fleet_argv(host_build, pki, broker, out, transport, "--devices", "50", "--samples",
                                          "5", "--interval-ms", "100", "--connect-rate", "200", "--seed", "7"),
                              capture_output=True, text=True, check=False, timeout=120)
        subscriber.wait_for(250)
        received = subscriber.settle()
    finally:
        subscriber.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.log.read_text(errors="replace")[-3000:]
    assert received == 250 and subscriber.duplicates == 0

    rows = _connections(out)
    ids = [f"f{i:04d}" for i in range(50)]
    assert [r["device"] for r in rows] == ids
    for r in rows:
        assert r["error"] == "" and r["messages"] == "5" and r["connack_ms"] != "" and r["tcp_connect_ms"] != ""
        assert (r["handshake_ms"] != "") == (transport == "tls")
    starts = [int(r["t_start_us"]) for r in rows]
    assert all(b > a for a, b in zip(starts, starts[1:], strict=False)), "started in index order at the rate"
    assert abs((starts[-1] - starts[0]) - 49 * 5000) < 2000, "200 devices/s: 5 ms apart"

    offsets = set()
    for device, start in zip(ids, starts, strict=True):
        log = _send_log(out / f"{device}.csv")
        assert [r["seq"] for r in log] == list(range(5))
        for r in log:
            assert r["bytes"] == 65
            assert r["t_send_us"] - r["t_intended_us"] >= 0, (device, r)
            assert subscriber.messages[(device, r["seq"])] == r["t_send_us"], "the payload's t is the logged send time"
        intended0 = log[0]["t_intended_us"]
        assert all(r["t_intended_us"] == intended0 + r["seq"] * 100000 for r in log)
        assert 0 <= intended0 - start < 100000, "the random offset lies within the first interval"
        offsets.add(intended0 - start)
    assert len(offsets) > 40, "seeded offsets differ between devices"

    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["devices"] == 50 and summary["connected"] == 50 and summary["failed"] == {}
    assert summary["messages_sent"] == 250 and summary["interrupted"] is False
    lag = summary["schedule_lag_us"]
    assert lag["n"] == 250 and 0 <= lag["p50"] <= lag["p99"] <= lag["max"]
    assert summary["cpu_user_s"] + summary["cpu_sys_s"] > 0 and summary["cpu_us_per_message"] > 0
    assert summary["max_rss_kb"] > 0
    if transport == "tls":
        keys = (out / "keys.log").read_text().splitlines()
        assert len(keys) == 50 and all(re.fullmatch(r"CLIENT_RANDOM [0-9a-f]{64} [0-9a-f]{96}", k) for k in keys)
        assert len({k.split()[1] for k in keys}) == 50
        assert (out / "keys.log").stat().st_mode & 0o777 == 0o600


def test_fleet_same_seed_same_offsets(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(CHACHA_OPENSSL)
    offsets = []
    for run in ("a", "b"):
        out = tmp_path / run
        proc = subprocess.run(_fleet_argv(host_build, pki, broker, out, "plain", "--devices", "5", "--samples", "1",
                                          "--interval-ms", "200", "--seed", "42"),
                              capture_output=True, text=True, check=False, timeout=60)
        assert proc.returncode == 0, proc.stderr
        starts = [int(r["t_start_us"]) for r in _connections(out)]
        offsets.append([_send_log(out / f"f{i:04d}.csv")[0]["t_intended_us"] - s for i, s in enumerate(starts)])
    assert offsets[0] == offsets[1]


@pytest.mark.parametrize("value", ["0", "1000001", "-3", "many", ""])
def test_fleet_refuses_bad_devices(host_build: HostBuild, tmp_path: Path, value: str) -> None:
    proc = subprocess.run([str(host_build.build_dir / "fleet"), "--devices", value, "--out-dir", str(tmp_path / "o")],
                          capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ('fleet: error InvalidArgument: --devices: expected an integer 1..1000000, '
                                   f'got "{value}"')
    assert not (tmp_path / "o").exists()


def test_fleet_refuses_missing_devices_and_unknown_options(host_build: HostBuild, tmp_path: Path) -> None:
    fleet = str(host_build.build_dir / "fleet")
    cases = [
        ([fleet, "--out-dir", str(tmp_path)], "fleet: error InvalidArgument: --devices N is required (1..1000000)"),
        ([fleet, "--devices", "3", "--out-dir", str(tmp_path), "--device-id", "x"],
         "fleet: error InvalidArgument: unknown option: --device-id (fleet --help lists its options)"),
        ([fleet, "--devices", "3", "--out-dir", str(tmp_path), "--qos", "3"],
         'fleet: error InvalidArgument: --qos: expected an integer 0..2, got "3"'),
        ([fleet, "--devices", "3", "--out-dir", str(tmp_path), "--connect-rate", "0"],
         'fleet: error InvalidArgument: --connect-rate: expected a number 0.01..10000 (decimals allowed), got "0"'),
    ]
    for argv, line in cases:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        assert (proc.returncode, proc.stderr.strip()) == (2, line)


def _nofile(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_fleet_refuses_too_few_file_descriptors(host_build: HostBuild, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = subprocess.run([str(host_build.build_dir / "fleet"), "--devices", "100", "--out-dir", str(out)],
                          capture_output=True, text=True, check=False, timeout=30, preexec_fn=_nofile(64, 64))
    assert proc.returncode == 2, proc.stderr
    assert re.fullmatch(r"fleet: error InvalidArgument: --devices 100 needs about 1\d\d file descriptors; "
                        r"the limit is 64 \(ulimit -n\)", proc.stderr.strip()), proc.stderr
    assert not out.exists(), "refused before anything was written"


def test_fleet_raises_the_soft_descriptor_limit(host_build: HostBuild, pki: Pki, broker_factory,
                                                tmp_path: Path) -> None:
    broker = broker_factory(CHACHA_OPENSSL)
    out = tmp_path / "o"
    proc = subprocess.run(_fleet_argv(host_build, pki, broker, out, "plain", "--devices", "100", "--samples", "1",
                                      "--interval-ms", "10", "--connect-rate", "1000"),
                          capture_output=True, text=True, check=False, timeout=60, preexec_fn=_nofile(64, 4096))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "summary.json").read_text())["connected"] == 100


@pytest.mark.parametrize("transport", ["plain", "tls"])
def test_fleet_sigint_stops_and_flushes(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path,
                                        transport: str) -> None:
    """SIGINT mid-run: every device stops before its next message, the logs hold what was sent, exit 130."""
    broker = broker_factory(CHACHA_OPENSSL)
    out = tmp_path / "fleet"
    subscriber = Subscriber(broker.plain_port)
    try:
        proc = subprocess.Popen(_fleet_argv(host_build, pki, broker, out, transport, "--devices", "50", "--samples",
                                            "1000", "--interval-ms", "500", "--connect-rate", "200"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert subscriber.wait_for(100) >= 100, "the fleet did not get going"
        t_signal = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        stop_s = time.monotonic() - t_signal
        received = subscriber.settle()
    finally:
        if proc.poll() is None:
            proc.kill()
        subscriber.close()
    assert proc.returncode == 130, stdout + stderr
    assert stop_s < 3, f"took {stop_s:.1f} s: the sleeping devices were not woken"
    assert re.fullmatch(r"fleet: error Interrupted: stopped by a signal after \d+ messages; the logs are written",
                        stderr.strip()), stderr
    rows = _connections(out)
    assert len(rows) == 50 and {r["error"] for r in rows} == {"Interrupted"}
    logged = 0
    for r in rows:
        log = _send_log(out / f"{r['device']}.csv")
        assert len(log) == int(r["messages"]) and [x["seq"] for x in log] == list(range(len(log)))
        logged += len(log)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["messages_sent"] == logged
    assert summary["failed"] == {"Interrupted": 50}
    assert received == logged, "every message in a send log reached the broker, no more"


def test_fleet_beyond_one_process(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path) -> None:
    """More devices than one process may run (the core's select() needs every socket below FD_SETSIZE,
    1024): worker processes, each a thread per device; every device connects, every message arrives."""
    need = 2600  # the broker holds a socket per device too, and inherits this process's limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    broker = broker_factory(CHACHA_OPENSSL)
    out = tmp_path / "fleet"
    subscriber = Subscriber(broker.plain_port)
    try:
        proc = subprocess.run(_fleet_argv(host_build, pki, broker, out, "plain", "--devices", "1100", "--samples",
                                          "2", "--interval-ms", "500", "--connect-rate", "2000"),
                              capture_output=True, text=True, check=False, timeout=120)
        subscriber.wait_for(2200)
        received = subscriber.settle()
    finally:
        subscriber.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.log.read_text(errors="replace")[-3000:]
    assert received == 2200
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 3 and summary["connected"] == 1100 and summary["messages_sent"] == 2200
    rows = _connections(out)
    assert [r["device"] for r in rows] == [f"f{i:04d}" for i in range(1100)] and {r["error"] for r in rows} == {""}
    assert all(len(_send_log(out / f"f{i:04d}.csv")) == 2 for i in range(1100))
    assert not list(out.glob(".fleet-shard-*")), "the workers' result files are merged and removed"
