"""No side doors: `firmware build`, `up` and `board check` take their run options from the axis table
(orchestrator/cli/axis_options.py with_run_options), with the names, units, defaults, help and ranges of
`testbed run`; none declares payload, samples, interval, QoS, scenario, impairment or baud again."""

from __future__ import annotations

from typing import Any

import click
import pytest
import typer

from orchestrator.cli import firmware
from orchestrator.cli.main import app, main
from orchestrator.model.axes import AXES

COMMANDS = [(("firmware", "build"), ("scenario", "payload", "samples", "interval_ms", "qos")),
            (("up",), ("scenario", "impairment")),
            (("board", "check"), ("serial_port", "baud", "board_host", "reset_board", "scenario"))]


def _params(*path: str) -> dict[str, click.Parameter]:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return {str(p.name): p for p in command.params}


def _seen(p: click.Parameter) -> tuple[Any, ...]:
    kind = getattr(p, "type_descriptor", None)
    return (p.opts, p.default, getattr(p, "help", None), getattr(kind, "annotation", None), p.required,
            getattr(p, "min", None), getattr(p, "max", None))


@pytest.mark.parametrize("path,axes", COMMANDS, ids=lambda v: " ".join(v) if isinstance(v[0], str) else "")
def test_the_same_options_as_run(path: tuple[str, ...], axes: tuple[str, ...]) -> None:
    run, other = _params("run"), _params(*path)
    for name in axes:
        key = AXES[name].option or name
        assert key in other, f"`{' '.join(path)}` has no --{key.replace('_', '-')}: {sorted(other)}"
        assert _seen(other[key]) == _seen(run[key]), name


class Built(BaseException):
    """Stops `firmware build` once it has its settings' values (main() turns an Exception into exit 70)."""


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `firmware build` asks the firmware's settings for (then it stops: nothing is built)."""
    seen: dict[str, Any] = {}

    def keep(scenario: str, _pki: object, **kwargs: Any) -> None:
        seen.update(scenario=scenario, **kwargs)
        raise Built

    monkeypatch.setattr(firmware, "settings_for_scenario", keep)
    return seen


def _build(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int | None, str]:
    try:
        code: int | None = main(["firmware", "build", *args])
    except Built:
        code = None
    return code, capsys.readouterr().err


def test_firmware_build_reads_runs_units(capsys: pytest.CaptureFixture[str], settings: dict[str, Any]) -> None:
    assert _build(capsys, "--scenario", "plain", "--interval", "0.5s", "--qos", "2", "--payload", "100")[0] is None
    assert settings == {"scenario": "plain", "payload": 100, "samples": 200, "interval_ms": 500, "qos": 2,
                        "device_id": "e1", "marker_pin": None}  # no marker unless asked (issue 42)
    _build(capsys, "--marker-pin", "4")
    assert settings["marker_pin"] == 4
    _build(capsys)
    assert settings["interval_ms"] == AXES["interval_ms"].default  # `run`'s default, 250 ms (it was 1000 here)


def test_firmware_build_refuses_as_run_does(capsys: pytest.CaptureFixture[str], settings: dict[str, Any]) -> None:
    code, err = _build(capsys, "--payload", "5000")
    assert code == 1 and "invalid options: payload: Input should be less than or equal to 4096" in err
    code, err = _build(capsys, "--interval", "0.5ms")
    assert code == 1 and "interval 0.5 ms: the firmware publishes every whole millisecond" in err
    assert not settings


def test_firmware_builds_old_interval_option_still_works(capsys: pytest.CaptureFixture[str],
                                                        settings: dict[str, Any]) -> None:
    code, err = _build(capsys, "--interval-ms", "1000")
    assert code is None and settings["interval_ms"] == 1000
    assert "--interval-ms is deprecated: use --interval 1000ms" in " ".join(err.split())
    assert getattr(_params("firmware", "build")["old_interval_ms"], "hidden", False)  # not in --help


def test_board_check_needs_a_serial_port(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["board", "check"])
    assert code == 1 and "board check needs --serial-port" in capsys.readouterr().err
