"""A fleet whose devices reconnect (issue 27 part 1): the fleet binary with ``--connection``, ``--per-connection K``
and ``--sleep-ms``, against a real Mosquitto 2.0 (TLS 1.2, ECDHE-ECDSA-CHACHA20-POLY1305 only).

Each device is the core's Publisher with its own transport, so it keeps its own saved session (resume-id) or
ticket (resume-ticket). What the fleet claims (its connections log: one row per connection of every device,
resumed = the client's claim) is checked against a paho subscriber on the broker's plain listener (every
reading of every device arrived) and against the schedule the sleep asks for. The wire's own verdict (the
broker's Certificate messages, the resumed ServerHellos) is checked at fleet scale by
tests/integration/test_fleet_lifecycle.py.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
from fwtest_support import HostBuild, Pki
from test_fleet_loader import CHACHA_OPENSSL, Subscriber, _fleet_argv

DEVICES, K, CONNS = 6, 3, 3
INTERVAL_MS, SLEEP_MS = 100, 400
LOG_HEADER = ["device", "conn", "t_open_us", "tcp_connect_ms", "handshake_ms", "connack_ms", "resumed", "messages",
              "close", "error",
              "hello_sent_ms", "flight_in_ms", "verified_ms", "kex_done_ms", "finished_sent_ms", "device_busy_ms"]


def _run(host_build: HostBuild, pki: Pki, broker_factory, out: Path, mode: str) -> tuple[subprocess.CompletedProcess,
                                                                                          Subscriber, int]:
    broker = broker_factory(CHACHA_OPENSSL)
    subscriber = Subscriber(broker.plain_port)
    try:
        proc = subprocess.run(_fleet_argv(host_build, pki, broker, out, "tls", "--devices", str(DEVICES), "--samples",
                                          str(K * CONNS), "--interval-ms", str(INTERVAL_MS), "--connect-rate", "50",
                                          "--connection", mode, "--per-connection", str(K), "--sleep-ms",
                                          str(SLEEP_MS), "--connections-log", str(out / "lifecycle.csv")),
                              capture_output=True, text=True, check=False, timeout=60)
        subscriber.wait_for(DEVICES * K * CONNS)
        received = subscriber.settle()
    finally:
        subscriber.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr + broker.log.read_text(errors="replace")[-3000:]
    return proc, subscriber, received


def _log(out: Path) -> dict[str, list[dict[str, str]]]:
    with (out / "lifecycle.csv").open() as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == LOG_HEADER
        rows = list(reader)
    by_device: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_device.setdefault(r["device"], []).append(r)
    return by_device


@pytest.mark.parametrize("mode", ["resume-ticket", "resume-id", "reconnect"])
def test_each_device_keeps_its_own_session(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path,
                                           mode: str) -> None:
    """6 devices x 3 connections of 3 readings: every reading arrives; each device's first connection is a full
    handshake and, resuming, every later one is resumed by the device's own session (reconnect: none is)."""
    out = tmp_path / "fleet"
    proc, subscriber, received = _run(host_build, pki, broker_factory, out, mode)
    assert received == DEVICES * K * CONNS and subscriber.duplicates == 0
    assert "asleep 400.000 ms between connections" in proc.stdout
    by_device = _log(out)
    assert sorted(by_device) == [f"f{i:04d}" for i in range(DEVICES)]
    for device, rows in by_device.items():
        assert [r["conn"] for r in rows] == [str(c) for c in range(CONNS)], device
        assert all(r["messages"] == str(K) and r["error"] == "" and r["close"] == "disconnect" for r in rows)
        assert all(r["handshake_ms"] != "" for r in rows)
        want = ["0"] + ["1" if mode.startswith("resume-") else "0"] * (CONNS - 1)
        assert [r["resumed"] for r in rows] == want, (device, rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["connection_mode"] == mode and summary["per_connection"] == K and summary["sleep_ms"] == SLEEP_MS
    assert summary["connections"] == DEVICES * CONNS
    assert summary["resumed_connections"] == (DEVICES * (CONNS - 1) if mode.startswith("resume-") else 0)


def test_the_sleep_sets_the_schedule(host_build: HostBuild, pki: Pki, broker_factory, tmp_path: Path) -> None:
    """Readings K apart by the interval; a connection's first reading the sleep after the previous one's last; each
    connection opened at its first reading's time (not before)."""
    out = tmp_path / "fleet"
    _run(host_build, pki, broker_factory, out, "resume-ticket")
    by_device = _log(out)
    assert sorted(by_device) == [f"f{i:04d}" for i in range(DEVICES)]  # every device, each checked below
    for device, rows in by_device.items():
        assert len(rows) == CONNS, (device, rows)
        with (out / f"{device}.csv").open() as f:
            sends = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(f)]
        assert [s["seq"] for s in sends] == list(range(K * CONNS))
        t0 = sends[0]["t_intended_us"]
        for s in sends:
            c, r = divmod(s["seq"], K)
            want = c * ((K - 1) * INTERVAL_MS + SLEEP_MS) * 1000 + r * INTERVAL_MS * 1000
            assert s["t_intended_us"] - t0 == want, (device, s)
            assert s["t_send_us"] >= s["t_intended_us"]
        for c, row in enumerate(rows):
            first = sends[c * K]
            assert int(row["t_open_us"]) >= first["t_intended_us"] - 5000, (device, c)  # the clocks' read order
            assert int(row["t_open_us"]) <= first["t_send_us"]


def test_one_device_sleeps_on_the_same_schedule(host_build: HostBuild, pki: Pki, broker_factory,
                                                tmp_path: Path) -> None:
    """vdevice takes --sleep-ms too (the core's schedule): N = 6 readings 50 ms apart, K = 2, each connection opened
    50 ms + 400 ms after the previous one's, every later one resumed by ID, every reading delivered."""
    from test_connection_modes import N, _run

    assert N == 6
    broker = broker_factory(CHACHA_OPENSSL)
    rows, _summary, received = _run(host_build, pki, broker, tmp_path / "v", "--connection", "resume-id",
                                     "--per-connection", "2", "--sleep-ms", "400")
    assert received == list(range(N))
    assert [r["resumed"] for r in rows] == ["0", "1", "1"]
    opens = [int(r["t_open_us"]) for r in rows]
    for a, b in zip(opens, opens[1:], strict=False):
        assert 450_000 - 20_000 <= b - a <= 450_000 + 50_000, opens  # (K - 1) x 50 ms interval + 400 ms asleep
