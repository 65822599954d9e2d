"""`testbed run` end to end on this machine: virtual ESP32 -> Mosquitto -> subscriber, captured,
analysed, checked against ground truth (RFC 7905's 21 B, the injected crash)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from .conftest import owned, run_testbed, service_container


def _run(tmp: Path, scenario: str, samples: int = 200, interval: str = "20ms", payload: int = 65):
    out = tmp / scenario
    proc = run_testbed("run", "--scenario", scenario, "--payload", str(payload), "--samples", str(samples),
                       "--interval", interval, "--out", str(out))
    return proc, out


@pytest.fixture(scope="module")
def tls_and_plain(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    run_testbed("down")
    tls = _run(tmp, "tls")
    plain = _run(tmp, "plain")
    yield tls, plain
    run_testbed("down")


def test_tls_run_200_messages_all_recorded_and_verified_from_capture(tls_and_plain):
    (proc, out), _ = tls_and_plain
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cell = json.loads((out / "cell.json").read_text())
    assert cell["status"] == "ok" and cell["received"] == 200
    # every message the virtual ESP32 sent was recorded by the subscriber
    sub = pd.read_csv(out / "logs" / "subscriber.csv")
    assert sorted(sub["seq"]) == list(range(200)) and set(sub["bytes"]) == {65}
    m = json.loads((out / "metrics.json").read_text())
    assert m["schema_version"] == 2
    # negotiated suite read from the capture's ServerHello, not from our config
    assert m["tls"]["version"] == "TLS 1.2" and m["tls"]["cipher_suite_id"] == "0xcca9"
    assert m["overhead_bytes"]["tls_overhead"] == 21  # RFC 7905: 5 B header + 16 B Poly1305 tag
    assert m["loss"]["loss_pct"] == 0 and m["loss"]["received_unique"] == 200
    assert m["delay_ms"]["available"] and m["delay_ms"]["negative_count"] == 0
    pm = pd.read_csv(out / "per_message.csv")
    assert sorted(pm["seq"]) == list(range(200)) and set(pm["tls_overhead"]) == {21}
    assert set(pm["mqtt_len"]) == {84}  # 2 fixed header + 2 + 15 topic "testbed/sensors" + 65 payload
    # QoS 0's exchange is the PUBLISH alone (exchanges.csv, its own export pass), as per_message.csv counts it
    ex = pd.read_csv(out / "exchanges.csv").merge(pm, on="seq")
    assert len(ex) == 200 and set(ex["packets_up"]) == {1} and set(ex["packets_down"]) == {0}
    assert (ex["mqtt_bytes"] == ex["mqtt_len"]).all() and (ex["wire_bytes"] == ex["tcp_payload_len"]).all()
    assert (ex["wire_bytes"] - ex["mqtt_bytes"] == ex["tls_overhead"]).all()
    assert m["resources"]["broker_cpu_s"] is not None and m["resources"]["publisher_cpu_s"] is not None
    for raw in ("capture/capture.pcapng", "logs/publisher.csv", "logs/broker.log", "keylogs/publisher.keys"):
        assert (out / raw).stat().st_size > 0, raw
    assert owned("container") == []  # torn down


def test_tls_minus_plain_overhead_is_21_bytes_per_message(tls_and_plain):
    (tls_proc, tls_out), (plain_proc, plain_out) = tls_and_plain
    assert plain_proc.returncode == 0, plain_proc.stdout + plain_proc.stderr
    tls_m = json.loads((tls_out / "metrics.json").read_text())
    plain_m = json.loads((plain_out / "metrics.json").read_text())
    assert plain_m["tls"]["version"] is None
    assert tls_m["overhead_bytes"]["frame_len"] - plain_m["overhead_bytes"]["frame_len"] == 21
    assert tls_m["overhead_bytes"]["mqtt_len"] == plain_m["overhead_bytes"]["mqtt_len"]


def test_publisher_crash_marks_run_failed_and_keeps_logs(tmp_path):
    run_testbed("down")
    out = tmp_path / "crash"

    def kill_publisher() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (out / "logs" / "subscriber.csv").exists() and \
                    (out / "logs" / "subscriber.csv").read_text().count("\n") > 10:
                subprocess.run(["docker", "kill", service_container("publisher")], capture_output=True, check=False)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_publisher)
    killer.start()
    proc = run_testbed("run", "--scenario", "plain", "--samples", "400", "--interval", "20ms", "--out", str(out))
    killer.join()
    assert proc.returncode == 1
    assert "run failed" in proc.stderr and "Traceback" not in proc.stderr
    cell = json.loads((out / "cell.json").read_text())
    assert cell["status"] == "failed" and 10 < cell["received"] < 400
    assert cell["error"].startswith("publisher failed first (exited with code 137)"), cell["error"]
    assert (out / "logs" / "subscriber.csv").exists() and (out / "capture" / "capture.pcapng").exists()
    states = evidence(out, ("broker", "capture", "subscriber", "publisher"))
    assert states["publisher"]["exit_code"] == 137 and states["broker"]["status"] == "running"
    assert owned("container") == []


def evidence(out: Path, services: tuple[str, ...]) -> dict[str, dict]:
    """logs/<service>.log of every container and logs/containers.json; each container's state."""
    record = json.loads((out / "logs" / "containers.json").read_text())
    states = {c["service"]: c["state"] for c in record["containers"]}
    assert sorted(states) == sorted(services)
    for service in services:
        assert (out / "logs" / f"{service}.log").exists(), service
    return states


@contextmanager
def read_only_folder(folder: Path) -> Iterator[None]:
    """``folder`` read-only even for root in a container (a read-only bind mount over itself)."""
    folder.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root (CI runs as root)")
def test_capture_that_cannot_write_fails_the_run_naming_capture_with_every_log_kept(tmp_path):
    # what an unprivileged user saw: dumpcap could not write, `compose up --wait` exited 0 anyway, and the
    # error blamed the subscriber (which never started) with an empty logs/ folder
    run_testbed("down")
    out = tmp_path / "ro"
    with read_only_folder(out / "capture"):
        proc = run_testbed("run", "--scenario", "tls", "--samples", "20", "--interval", "20ms", "--out", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    # the capture's shell cannot open its output for dumpcap (images/capture/capture.sh): sh's exit code 2
    assert "the testbed did not come up: capture failed first (exited with code 2)" in proc.stderr, proc.stderr
    assert "cannot create /data/capture/capture.pcapng: Read-only file system" in proc.stderr
    cell = json.loads((out / "cell.json").read_text())
    assert cell["status"] == "failed" and "capture failed first" in cell["error"]
    states = evidence(out, ("broker", "capture", "subscriber"))
    assert states["capture"]["status"] == "exited" and states["subscriber"]["status"] == "created"
    assert "Read-only file system" in (out / "logs" / "capture.log").read_text()
    assert json.loads((out / "logs" / "containers.json").read_text())["first_failure"]["service"] == "capture"
    assert owned("container") == []


def test_capture_killed_mid_run_fails_the_run_naming_capture(tmp_path):
    run_testbed("down")
    out = tmp_path / "nocapture"

    def kill_capture() -> None:
        deadline = time.monotonic() + 60
        log = out / "logs" / "subscriber.csv"
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count("\n") > 10:
                subprocess.run(["docker", "kill", service_container("capture")], capture_output=True, check=False)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_capture)
    killer.start()
    proc = run_testbed("run", "--scenario", "plain", "--samples", "400", "--interval", "20ms", "--out", str(out))
    killer.join()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    cell = json.loads((out / "cell.json").read_text())
    assert cell["status"] == "failed" and cell["error"].startswith("capture failed first (exited with code 137)")
    assert cell["received"] < 400  # stopped early: nothing to gain from a run without its capture
    states = evidence(out, ("broker", "capture", "subscriber", "publisher"))
    assert states["capture"]["exit_code"] == 137
    assert owned("container") == []


def test_payload_below_minimum_refused_before_anything_starts():
    proc = run_testbed("run", "--scenario", "tls", "--payload", "40", "--samples", "200")
    assert proc.returncode == 1
    assert "below the minimum of 62 B" in proc.stderr
    assert owned("container") == []
