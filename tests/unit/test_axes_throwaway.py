"""A throwaway axis added to the axis table reaches every place an axis must reach, with no other edit.

The table (orchestrator/model/axes.py) with one more axis gives its own RunSpec, Cell and SweepPlan
(model/sweep.py sweep_models) and its own `run` and `sweep` commands (cli/main.py add_run_commands): the
axis is in both `--help`s, in the plan, in the cell id, in vdevice's and the fleet's command line and in
the board's RUN body; a bundle whose cells ran two of its values is two conditions in comparisons.csv
and the report (results/bundle.py names a condition from the table). (That vdevice, the fleet and
board-emu accept such an option once it is a line of device_options.def is the firmware's own test.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli.main import Models, add_run_commands
from orchestrator.cli.main import app as main_app
from orchestrator.lab.pki import Pki
from orchestrator.model.axes import AXES, Axis, Device, SweepOption
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import sweep_models
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import records
from orchestrator.publishers.virtual import publisher_args

THROWAWAY = Axis("tw_level", int, 3, "the throwaway knob", ge=0, le=9,
                 sweep=SweepOption("tw_levels", (3,), "comma list of throwaway knobs"),
                 cell=lambda v: f"tw{v}", device=Device("tw_level"))
runner = CliRunner()


class Built(Exception):
    """Stops a command once it has built its spec or plan: nothing starts."""


class Throwaway:
    """The axis table with one row appended (``axis``), and the `run` and `sweep` commands made from it."""

    def __init__(self, axis: Axis = THROWAWAY) -> None:
        self.table = AXES.with_axis(axis)
        models: tuple[Any, Any, Any] = sweep_models(self.table)  # their fields are the table's, not the type's
        self.RunSpec, self.Cell, self.SweepPlan = models
        self.built: list[Any] = []
        self.app = typer.Typer()
        add_run_commands(self.app, Models(self.table, self._keep(self.RunSpec), self._keep(self.SweepPlan)))

    def _keep(self, model: Any) -> Any:
        def build(**values: Any) -> Any:
            self.built.append(model(**values))
            raise Built
        return build

    def invoke(self, *args: str) -> Any:
        result = runner.invoke(self.app, list(args), env={"COLUMNS": "200"})
        assert isinstance(result.exception, Built), (result.output, result.exception)
        return self.built.pop()


@pytest.fixture
def tw() -> Throwaway:
    return Throwaway()


@pytest.mark.parametrize("command,option,text", [("run", "--tw-level", "the throwaway knob"),
                                                  ("sweep", "--tw-levels", "comma list of throwaway knobs")])
def test_in_both_helps(tw: Throwaway, command: str, option: str, text: str) -> None:
    result = runner.invoke(tw.app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and option in result.output and text in result.output, result.output
    mine = runner.invoke(main_app, [command, "--help"], env={"COLUMNS": "200"})
    assert mine.exit_code == 0 and "--tw-level" not in mine.output  # the real table stays as it is


def test_in_the_run_spec_with_its_range(tw: Throwaway) -> None:
    spec = tw.invoke("run", "--tw-level", "7")
    assert spec.tw_level == 7 and spec.values()["tw_level"] == 7
    refused = runner.invoke(tw.app, ["run", "--tw-level", "12"])
    assert "tw_level: Input should be less than or equal to 9" in str(refused.exception)


def test_in_the_plan_and_the_cell_id(tw: Throwaway) -> None:
    plan = tw.invoke("sweep", "--tw-levels", "2,5", "--payloads", "65", "--scenarios", "tls",
                     "--connections", "persistent,reconnect")
    assert plan.tw_levels == [2, 5]
    assert sorted(c.cell_id for c in plan.cells()) == ["tls-65B-none-reconnect-tw2-r1", "tls-65B-none-reconnect-tw5-r1",
                                                       "tls-65B-none-tw2-r1", "tls-65B-none-tw5-r1"]
    assert {(plan.run_spec(c).connection, plan.run_spec(c).tw_level) for c in plan.cells()} == {
        ("persistent", 2), ("persistent", 5), ("reconnect", 2), ("reconnect", 5)}
    assert "above the maximum of 9" in str(runner.invoke(tw.app, ["sweep", "--tw-levels", "3,10"]).exception)


@pytest.fixture
def lay(tmp_path: Path) -> Layout:
    lay = Layout(tmp_path / "cell-1")
    lay.pki.mkdir(parents=True)
    (lay.pki / "ca.crt").write_text("CA\n")
    (lay.pki / "passwords.txt").write_text("publisher:pw\n")
    return lay


def _pair(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_in_the_vdevice_and_fleet_command_lines(tw: Throwaway, lay: Layout) -> None:
    scenario = load_scenario("tls")
    one = tw.RunSpec(scenario="tls", tw_level=7)
    fleet = tw.RunSpec(scenario="tls", tw_level=8, devices=20)
    assert _pair(publisher_args(scenario, lay, None, one), "--tw-level") == "7"
    args = publisher_args(scenario, lay, None, fleet)
    assert args[0] == "fleet" and _pair(args, "--tw-level") == "8"


def test_in_the_board_run_body(tw: Throwaway, lay: Layout) -> None:
    scenario = load_scenario("plain")
    spec = tw.RunSpec(scenario="plain", publisher="esp32", serial_port="/dev/ttyUSB0", tw_level=4)
    body = p.encode_body(records.run_cell(scenario, lay, Pki(lay.pki, "ecdsa-p256"), spec, "192.0.2.1", 1883, None))
    assert body.decode().splitlines()[-1] == "tw_level=4"  # after the protocol's own keys
    assert "payload=65" in body.decode().splitlines()
