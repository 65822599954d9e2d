"""The axis table (orchestrator/model/axes.py) and the device's option table agree.

firmware/platformio/lib/testbed_core/src/device_options.def declares every option vdevice, the fleet and the
board's RUN parser take. For every axis that reaches the device: the same name, range, default and choices,
and the programs the axis's group sends it to take it (publish: vdevice and fleet; fleet: the fleet only;
lifecycle: vdevice; connection: vdevice and the fleet; a board key: the board).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.model.axes import AXES, MAX_SEED, Axis

DEF = Path(__file__).resolve().parents[2] / "firmware/platformio/lib/testbed_core/src/device_options.def"
ENTRY = re.compile(r"^TB_OPT_(UINT|MS|ENUM|TEXT|FLAG)\((.*)\)\s*$")
PROGRAMS = re.compile(r"^#define TB_PROGRAMS (.+)$")


@dataclass(frozen=True)
class Option:
    name: str
    kind: str
    min: float | None
    max: float | None
    default: Any
    choices: tuple[str, ...] | None
    programs: frozenset[str]


def _number(kind: str, text: str) -> float:
    if kind == "UINT":
        return MAX_SEED if text == "UINT64_MAX" else int(text)
    return float(text)


def _parse(text: str, programs: frozenset[str]) -> Option:
    m = ENTRY.match(text)
    assert m, text
    kind, args = m.group(1), [a.strip() for a in re.findall(r'"[^"]*"|[^,]+', m.group(2))]
    name = args[0]
    if kind in ("UINT", "MS"):
        low, high, default = (_number(kind, a) for a in args[1:4])
        return Option(name, kind, low, high, default, None, programs)
    if kind == "ENUM":
        return Option(name, kind, None, None, args[2].strip('"'), tuple(args[1].strip('"').split("|")), programs)
    return Option(name, kind, None, None, args[1].strip('"') if len(args) > 1 else None, None, programs)


def device_options() -> dict[str, Option]:
    options: dict[str, Option] = {}
    programs: frozenset[str] = frozenset()
    for line in DEF.read_text(encoding="utf-8").splitlines():
        if m := PROGRAMS.match(line):
            programs = frozenset(p.strip().removeprefix("TB_").lower() for p in m.group(1).split("|"))
        elif ENTRY.match(line):
            option = _parse(line, programs)
            assert option.name not in options, f"{option.name} twice in {DEF.name}"
            options[option.name] = option
    return options


DEVICE_AXES = AXES.device_axes()


def test_the_table_has_device_axes() -> None:
    assert {a.name for a in DEVICE_AXES} >= {"payload", "samples", "interval_ms", "qos", "seed", "connection",
                                             "per_connection", "close", "devices", "connect_rate"}


@pytest.mark.parametrize("axis", DEVICE_AXES, ids=lambda a: a.name)
def test_each_device_axis_is_the_def_option(axis: Axis) -> None:
    if not DEF.exists():
        pytest.fail(f"{DEF} is missing: the device's option table")
    assert axis.device is not None
    option = device_options().get(axis.device.name)
    assert option is not None, f"{axis.device.name} is not in {DEF.name}"
    if axis.choices is not None and isinstance(axis.choices[0], str):
        assert (option.kind, option.choices, option.default) == ("ENUM", axis.choices, axis.default)
    else:
        assert option.kind in ("UINT", "MS")
        assert option.kind == ("MS" if axis.type is float else "UINT"), "a decimal axis is MS, an integer UINT"
        low = axis.ge if axis.ge is not None else axis.gt
        high = axis.le
        if axis.choices is not None:  # a number from a list, e.g. qos 0|1
            low, high = min(axis.choices), max(axis.choices)
        # the device takes 0 for an interval (back to back); the run's range excludes it (gt=0): the same bound
        assert (option.min, option.max, option.default) == (low, high, axis.default)


@pytest.mark.parametrize("axis", DEVICE_AXES, ids=lambda a: a.name)
def test_the_programs_that_take_it(axis: Axis) -> None:
    device = axis.device
    assert device is not None
    options = device_options()
    takes = options[device.name].programs
    wanted = {"publish": {"vdevice", "fleet"}, "fleet": {"fleet"}, "lifecycle": {"vdevice"},
              "connection": {"vdevice", "fleet"}}[device.group]
    assert wanted <= takes, f"{device.name}: {sorted(wanted - takes)} do not take it"
    if device.board_key is not None:
        assert device.board_key in options and "board" in options[device.board_key].programs


PUBLISHER_OF = {"vdevice": "virtual", "fleet": "fleet", "board": "esp32"}
IGNORED_BY_BOARD = {"seed"}  # the simulated sensors' seed: a board reads its real sensors, a run may still give one


@pytest.mark.parametrize("axis", [a for a in DEVICE_AXES if a.device is not None and a.device.group != "fleet"],
                         ids=lambda a: a.name)
def test_the_publishers_an_axis_allows_are_the_programs_that_take_it(axis: Axis) -> None:
    """The device's option table decides: a publisher may be given a value other than the default exactly when its
    program takes the option (device_options.def's TB_PROGRAMS; the board by its RUN key). A program added to an
    option's line in the .def without the axis following it (or the reverse) fails here."""
    device = axis.device
    assert device is not None
    options = device_options()
    takes = {PUBLISHER_OF[p] for p in options[device.name].programs if p != "board"}
    if device.board_key is not None and "board" in options[device.board_key].programs:
        takes.add("esp32")
    allowed = set(axis.only.publishers) if axis.only is not None else {"virtual", "fleet", "esp32"}
    if axis.name in IGNORED_BY_BOARD:
        assert "esp32" not in takes and allowed - takes == {"esp32"}
    else:
        assert allowed == takes, f"{axis.name}: the rule allows {sorted(allowed)}, the .def's takers {sorted(takes)}"
    if "board" in options[device.name].programs:
        assert device.board_key is not None, f"{axis.name}: the board takes {device.name}, the axis sends no RUN key"
