"""Impairment through `testbed run` / `up` / `down`, measured from the capture against what was injected.

The loss and rate runs are made as our users make them: an unprivileged user in the docker group, from a
clone it owns (the `docker_user` fixture). Ctrl-C or SIGTERM during an impaired run leaving nothing is
tests/integration/test_sigterm_cleanup.py's (run, up, impair apply, a board run, a sweep) and the fault suite's."""

from __future__ import annotations

import json
import subprocess

import pandas as pd

from orchestrator.paths import state_dir

from .conftest import binomial_bounds, owned, run_testbed, service_container
from .docker_user import DockerUser


def test_lossy_5pct_retransmission_rate_matches_the_injected_loss(docker_user: DockerUser):
    run_testbed("down")
    out = docker_user.work / "runs" / "lossy"
    docker_user.mkdir(out.parent)
    proc = docker_user.testbed("run", "--scenario", "plain", "--samples", "800", "--interval", "8ms",
                               "--impairment", "lossy-5pct", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = json.loads((out / "metrics.json").read_text())
    loss = m["loss"]
    assert loss["loss_pct"] == 0  # TCP: every message still arrives
    lost = loss["tcp_segments_lost_to_broker"]  # transmissions whose bytes the publisher had to send again
    sent = loss["tcp_transmissions_to_broker"]  # every data transmission the drop rule saw
    lo, hi = binomial_bounds(sent, 0.05)
    assert sent >= 700 and lo <= lost <= hi, (lost, sent, lo, hi)
    assert loss["tcp_retransmissions_to_broker"] >= 1
    record = json.loads((out / "impairment.json").read_text())
    assert record["applied"] and "numgen random mod 100 < 5" in record["after"]
    assert "testbed_impair {" not in record["after_clear"]
    # independent check: the nft rule's own counter of dropped packets (data + the odd SYN/ACK/FIN)
    dropped = record["dropped_packets"]
    assert dropped is not None and lost <= dropped <= lost + 3, (lost, dropped)
    cell = json.loads((out / "cell.json").read_text())
    assert cell["impairment_state"]["profile"] == "lossy-5pct"


def test_narrowband_250kbit_never_exceeds_the_rate_by_10pct(docker_user: DockerUser):
    run_testbed("down")
    out = docker_user.work / "runs" / "narrow"
    docker_user.mkdir(out.parent)
    proc = docker_user.testbed("run", "--scenario", "plain", "--payload", "1024", "--samples", "300",
                               "--interval", "5ms", "--impairment", "narrowband-250kbit", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pk = pd.read_csv(out / "packets.csv")
    up = pk[pk["leg"] == "publisher->broker"]
    t0 = up["time"].min()
    windows = up.groupby(((up["time"] - t0) // 1.0).astype(int))["frame_len"].sum() * 8 / 1000.0
    full = windows.iloc[:-1]  # the last window is partial
    assert len(full) >= 5, windows
    assert full.max() <= 250 * 1.10, windows.to_dict()
    assert full.median() >= 250 * 0.7, windows.to_dict()  # the limit was really reached, not idle


def test_up_with_broker_side_impairment_is_cleared_by_down():
    run_testbed("down")
    proc = run_testbed("up", "--scenario", "plain", "--host-port", "18883", "--impairment", "narrowband-250kbit")
    try:
        # narrowband is publisher->broker: refused for `up`, nothing started
        assert proc.returncode == 1 and "runs no publisher" in proc.stderr
        assert owned("container") == []
        profile = state_dir().parent / ".cache" / "b2s-loss.yaml"
        profile.parent.mkdir(parents=True, exist_ok=True)
        profile.write_text("name: b2s-loss\nloss_pct: 3\ndirection: broker->subscriber\n")
        proc = run_testbed("up", "--scenario", "plain", "--host-port", "18883", "--impairment", str(profile))
        assert proc.returncode == 0, proc.stderr
        assert "impairment b2s-loss applied to broker->subscriber" in proc.stdout
        pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", service_container("subscriber")],
                             capture_output=True, text=True, check=True).stdout.strip()
        table = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "nft", "list", "table", "inet",
                                "testbed_impair"], capture_output=True, text=True, check=False).stdout
        assert "numgen random mod 100 < 3" in table
        down = run_testbed("down")
        assert down.returncode == 0 and "impairment b2s-loss cleared" in down.stdout
        assert owned("container") == []
        again = run_testbed("down")
        assert again.returncode == 0
    finally:
        run_testbed("down")
