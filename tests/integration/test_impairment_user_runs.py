"""Impairment through `testbed run`, measured from the capture against what was injected, made as our users make
it: an unprivileged user in the docker group, from a clone it owns (the `docker_user` fixture; the second docker lane
runs this file as its own user, tests/conftest.py SECOND_LANE). Moved out of test_impairment_runs.py, whose `up` on a
fixed host port runs as root."""

from __future__ import annotations

import json

import pandas as pd

from .conftest import binomial_bounds
from .docker_user import DockerUser


def test_lossy_5pct_retransmission_rate_matches_the_injected_loss(docker_user: DockerUser):
    docker_user.testbed("down")
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
    docker_user.testbed("down")
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
