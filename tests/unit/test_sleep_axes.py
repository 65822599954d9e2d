"""The board's sleep as run options (issue 42 part 2): ``power_save`` (none, modem-sleep) and ``sleep_mode`` (stay,
light, deep) are axes declared once (orchestrator/model/axes.py, device_options.def), refused where they make no
sense by named rules, recorded in the cell's id and spec, and passed to vdevice and to the board's RUN only when
given (the study's command lines and RUN bodies unchanged)."""

from __future__ import annotations

import pytest

from orchestrator.lab.pki import Pki
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import records
from orchestrator.publishers.virtual import publisher_args
from tests.unit.test_axes_throwaway import _pair, lay  # noqa: F401, F811 (lay: the fixture of a cell's folder)


@pytest.mark.parametrize("mode", ["deep", "light"])
def test_a_sleep_between_connections_needs_connections_to_sleep_between(mode: str) -> None:
    with pytest.raises(ValueError) as err:
        RunSpec(scenario="tls", sleep_mode=mode)
    assert "(rule sleep-is-between-connections)" in str(err.value)
    assert f"--sleep-mode {mode}" in str(err.value)
    assert RunSpec(scenario="tls", sleep_mode=mode, connection="resume-ticket").sleep_mode == mode


@pytest.mark.parametrize("values", [{"sleep_mode": "deep", "connection": "reconnect"}, {"power_save": "modem-sleep"}])
def test_the_fleet_does_not_take_them(values: dict[str, str]) -> None:
    with pytest.raises(ValueError) as err:
        RunSpec(scenario="tls", devices=3, **values)
    assert "(rule sleep-modes-are-one-devices)" in str(err.value)


def test_vdevice_gets_them_only_when_given(lay: Layout) -> None:  # noqa: F811
    scenario = load_scenario("tls")
    args = publisher_args(scenario, lay, None, RunSpec(scenario="tls", connection="resume-ticket",
                                                       sleep_mode="deep", power_save="modem-sleep"))
    assert _pair(args, "--sleep-mode") == "deep" and _pair(args, "--power-save") == "modem-sleep"
    plain = publisher_args(scenario, lay, None, RunSpec(scenario="tls", connection="resume-ticket"))
    assert "--sleep-mode" not in plain and "--power-save" not in plain


def test_the_board_gets_them_as_run_keys_of_protocol_4(lay: Layout) -> None:  # noqa: F811
    scenario = load_scenario("plain")
    spec = RunSpec(scenario="plain", publisher="esp32", serial_port="/dev/ttyUSB0", connection="reconnect",
                   sleep_mode="light", power_save="modem-sleep")
    lines = p.encode_body(records.run_cell(scenario, lay, Pki(lay.pki, "ecdsa-p256"), spec, "192.0.2.1", 1883,
                                           None)).decode().splitlines()
    assert "sleep_mode=light" in lines and "power_save=modem-sleep" in lines
    study = RunSpec(scenario="plain", publisher="esp32", serial_port="/dev/ttyUSB0")
    body = p.encode_body(records.run_cell(scenario, lay, Pki(lay.pki, "ecdsa-p256"), study, "192.0.2.1", 1883, None))
    assert "sleep_mode" not in body.decode() and "power_save" not in body.decode()
    assert p.VERSION == 4


def test_a_sweep_with_and_without_sleep() -> None:
    plan = SweepPlan(scenarios=["plain", "tls"], payloads=[65], connections=["reconnect", "resume-ticket"],
                     sleep_modes=["stay", "deep"])
    ids = sorted(c.cell_id for c in plan.cells())
    assert len(ids) == 8 and "tls-65B-none-resume-ticket-deepsleep-r1" in ids and "tls-65B-none-reconnect-r1" in ids
    assert {plan.run_spec(c).sleep_mode for c in plan.cells()} == {"stay", "deep"}
    with pytest.raises(ValueError, match="rule sleep-is-between-connections"):
        SweepPlan(connections=["persistent", "reconnect"], sleep_modes=["stay", "deep"])
