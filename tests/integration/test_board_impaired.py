"""--impairment with --publisher esp32, against the emulated board, as the docker-group user: the profile
acts at the broker's ingress on the board's packets (its path crosses no hop of ours); the record says
where and what the broker-side capture does not see; the capture and the rules' own counters check it."""

from __future__ import annotations

import json
import os
import re

import pandas as pd

from .board_emu import emulate
from .conftest import binomial_bounds, owned
from .docker_user import DockerUser

DELAY_MS, LOSS_PCT = 20, 3


def test_a_boards_path_loses_and_delays_at_the_brokers_ingress_as_recorded(docker_user: DockerUser) -> None:
    proc, pty = emulate(docker_user, "impaired", "--seed", "9")
    try:
        profile = docker_user.work / "board-path.yaml"
        profile.write_text(f"description: the test's board path\ndelay_ms: {DELAY_MS}\nloss_pct: {LOSS_PCT}\n"
                           "direction: publisher->broker\n")
        os.chmod(profile, 0o644)
        docker_user.testbed("down")
        out = docker_user.work / "runs" / "board-impaired"
        docker_user.mkdir(out.parent)
        run = docker_user.testbed("run", "--scenario", "tls", "--payload", "65", "--samples", "400", "--interval",
                                  "20ms", "--publisher", "esp32", "--serial-port", str(pty),
                                  "--impairment", str(profile), "--out", str(out), timeout=600)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record = json.loads((out / "impairment.json").read_text())
    assert record["applied"] and record["delay_mechanism"] == "queue", record
    assert "do NOT include the injected delay" in record["board_path"]
    # the lab network Docker gave this run (172.x or, once those pools are used, 192.168.x)
    assert re.search(r"outside \d+\.\d+\.\d+\.\d+/\d+", record["board_path"]), record["board_path"]
    assert "testbed_impair {" not in record["after_clear"] and "TESTBED_Q" not in record["after_clear"]
    metrics = json.loads((out / "metrics.json").read_text())
    loss = metrics["loss"]
    assert loss["received_unique"] == 400  # TCP: every message still arrives
    # the nft rule's own counter against the board's segments the capture saw go unacknowledged
    lost, sent, dropped = (loss["tcp_segments_lost_to_broker"], loss["tcp_transmissions_to_broker"],
                           record["dropped_packets"])
    lo, hi = binomial_bounds(sent, LOSS_PCT / 100)
    assert lo <= lost <= hi and lost <= dropped <= lost + 6, (lost, sent, dropped)
    # the capture sees each PUBLISH as it arrives, before the line: the broker forwards it DELAY_MS later
    pm = pd.read_csv(out / "per_message.csv")
    first = pm[pm["dup"] == 0] if "dup" in pm else pm
    transit = first["broker_transit_ms"].median()
    stats = record["delay_line"][next(iter(record["delay_line"]))]
    print(f"board path: lost {lost}/{sent} (nft dropped {dropped}); broker transit median {transit:.2f} ms; "
          f"line {stats.get('accepted')} accepted")
    assert DELAY_MS <= transit <= DELAY_MS + 2, transit
    if metrics["uplink_ms"].get("available"):  # the capture's uplink does not contain the injected delay
        assert metrics["uplink_ms"]["median"] < DELAY_MS / 2, metrics["uplink_ms"]
    cell = json.loads((out / "cell.json").read_text())
    assert cell["impairment_state"]["board_path"] == record["board_path"]
    assert owned("container") == [] and owned("network") == []
