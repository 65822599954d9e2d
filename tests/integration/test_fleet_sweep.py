"""Issue 14 in CI, as the docker-group user: a fleet sweep (N virtual devices on the unchanged core, plain and
TLS), every device and message accounted for from its send log through the capture to the subscriber, and the
broker's cost per message, per handshake and per client in the bundle and the report. The acceptance size
(1,000 TLS devices x 20 at 1/s) runs in bench/fleet.py; CI runs a smaller fleet of the same shape."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from .conftest import owned
from .docker_user import DockerUser

DEVICES, SAMPLES = 150, 12  # 12 s of sending: steady windows after the ramp (1.5 s + handshakes)


@pytest.fixture(scope="module")
def fleet_bundle(docker_user: DockerUser) -> Path:
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "fleet")
    proc = docker_user.testbed("sweep", "--devices", str(DEVICES), "--connect-rate", "100", "--samples", str(SAMPLES),
                               "--interval", "1s", "--payloads", "65", "--scenarios", "plain,tls", "--out", str(out),
                               timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


def _cell(bundle: Path, scenario: str) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    run = bundle / "runs" / f"{scenario}-65B-none-{DEVICES}dev-r1"
    return (json.loads((run / "metrics.json").read_text()), pd.read_csv(run / "devices.csv"),
            pd.read_csv(run / "per_message.csv", dtype={"device": str}))


@pytest.mark.parametrize("scenario", ["plain", "tls"])
def test_every_device_and_message_is_accounted_for(fleet_bundle: Path, scenario: str) -> None:
    metrics, devices, pm = _cell(fleet_bundle, scenario)
    fleet = metrics["fleet"]
    msgs = fleet["messages"]
    print(f"{scenario}: {fleet['connected']}/{DEVICES} connected, {msgs['delivered']}/{msgs['expected']} delivered, "
          f"lag p99 {fleet['schedule_lag_us']['all']['p99']} us, handshake p99 "
          f"{fleet['connection_setup_ms']['handshake_ms']['p99']} ms")
    assert fleet["connected"] == DEVICES and fleet["failed"]["devices"] == 0
    assert msgs["expected"] == msgs["sent"] == DEVICES * SAMPLES and msgs["lost_accounted"]
    assert msgs["delivered"] + msgs["lost"] == msgs["sent"] and msgs["lost"] == sum(msgs["lost_at"].values())
    assert len(devices) == DEVICES and devices["device"].nunique() == DEVICES and (devices["sent"] == SAMPLES).all()
    assert int(devices["received"].sum()) == msgs["delivered"] and int(devices["lost"].sum()) == msgs["lost"]
    # the per-message table is keyed by (device, seq): every device's seq 0..SAMPLES-1 once
    assert not pm.duplicated(["device", "seq"]).any() and pm.groupby("device")["seq"].nunique().eq(SAMPLES).all()
    # every delivered message was seen on both broker legs of the capture, so a lost one would be placed
    assert msgs["capture_coverage"]["lost_at_reliable"], msgs["capture_coverage"]
    assert fleet["schedule_lag_us"]["all"]["p99"] is not None and fleet["loader"]["cpu_us_per_message"] > 0


def test_the_broker_cost_comes_from_the_capture_and_its_counters(fleet_bundle: Path) -> None:
    plain, _d, _pm = _cell(fleet_bundle, "plain")
    tls, _d, _pm = _cell(fleet_bundle, "tls")
    for name, m in (("plain", plain), ("tls", tls)):
        broker = m["fleet"]["broker"]
        print(f"{name}: broker per message {broker['per_message'].get('cpu_ms_per_event')} ms, per handshake "
              f"{broker['per_handshake'].get('cpu_ms_per_event')} ms, per client "
              f"{broker['memory_per_client'].get('bytes_per_client')} B; {broker['broker_cpu_limit']['verdict']}")
        # one publisher connection per device on the wire (the capture's SYNs, not the loader's word)
        assert broker["phases"]["handshakes"] == DEVICES, broker["phases"]
        assert broker["per_handshake"]["cpu_ms_per_event"] > 0 and broker["per_message"]["cpu_ms_per_event"] > 0
        assert broker["per_handshake"]["ci95_low"] is None or broker["per_handshake"]["ci95_low"] >= 0
        limit = broker["broker_cpu_limit"]
        assert limit["host_cpus"] and limit["steady_windows"] >= 3, limit
        assert limit["broker_ceiling"] == (limit["steady_mean_cores"] >= 0.9)
    # what each device negotiated, from the capture: ChaCha20-Poly1305 (0xCCA9) on every publisher session
    sessions = [s for s in tls["tls"]["sessions"] if s["role"] == "publisher"]
    assert len(sessions) == DEVICES and {s["cipher_suite_id"] for s in sessions} == {"0xcca9"}


def test_the_report_has_the_fleet_section_and_nothing_is_left(fleet_bundle: Path) -> None:
    report = (fleet_bundle / "report.md").read_text()
    assert "## Fleet" in report and f"tls-65B-none-{DEVICES}dev-r1" in report
    assert "devices.csv" in report
    assert owned("container") == [] and owned("network") == []
