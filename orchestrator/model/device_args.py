"""The device options of a run's axis values (orchestrator/model/axes.py ``Device``): the virtual devices' command
line flags and the board's RUN keys, in the table's order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.model.axes import AxisTable, Group


def device_argv(table: AxisTable, values: Mapping[str, Any], group: Group) -> list[str]:
    """The device options of one group as ``--flag value`` pairs, in the table's order."""
    args: list[str] = []
    for a in table.device_axes():
        d = a.device
        assert d is not None
        if d.group == group and (d.when is None or d.when(values)):
            v = values[a.name]
            args += [d.flag, f"{v:g}" if isinstance(v, float) else str(v)]
    return args


def run_options(table: AxisTable, values: Mapping[str, Any]) -> dict[str, Any]:
    """The board RUN's keys from the axes (None: left out of the body), in the table's order."""
    out: dict[str, Any] = {}
    for a in table.device_axes():
        d = a.device
        assert d is not None
        if d.board_key is None or d.group == "fleet":
            continue
        given = d.when is None or d.when(values)
        v = values[a.name]
        out[d.board_key] = (d.run_value(v) if d.run_value else v) if given else None
    return out
