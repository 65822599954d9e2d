"""A cell's events (--events) run only where a lab runs them: this host's (measure/local.py starts the timeline;
a lab inventory's site, measure/multihost.py, runs none), and link-down only where the publisher has a container
whose link it drops (a board has none). Before these rules both were accepted: the inventory's cell measured an
undisturbed link under the events' name, and a board's link-down failed mid-cell."""

from __future__ import annotations

import pytest

from orchestrator.errors import TestbedError
from orchestrator.model.run import RunSpec

BOARD = {"publisher": "esp32", "serial_port": "/dev/ttyUSB0"}


@pytest.mark.parametrize("events", ["broker-restart@5s", "link-down@5s:1s"])
def test_a_lab_inventorys_cell_with_events_is_refused(events: str) -> None:
    with pytest.raises((TestbedError, ValueError)) as refused:
        RunSpec(scenario="tls", events=events, inventory="/lab/inventory.yml")
    assert "(rule events-run-on-this-host)" in str(refused.value)


def test_a_boards_link_down_is_refused_and_its_broker_events_are_not() -> None:
    with pytest.raises((TestbedError, ValueError)) as refused:
        RunSpec(scenario="tls", events="broker-restart@5s,link-down@9s:1s", **BOARD)
    assert "(rule link-down-needs-a-container)" in str(refused.value)
    assert RunSpec(scenario="tls", events="broker-restart@5s", **BOARD).values()["events"] == "broker-restart@5s"


def test_events_on_this_host_still_run() -> None:
    spec = RunSpec(scenario="tls", events="broker-restart@5s,link-down@9s:1s", devices=10)
    assert spec.values()["events"] == "broker-restart@5s,link-down@9s:1s"
