"""The options of `testbed run` and `testbed sweep`, made from the axis table (orchestrator/model/axes.py).

``with_axis_options(fn, table, "run")`` gives typer a command whose signature is every axis option of the
command followed by ``fn``'s own options (``--out`` ...); it calls ``fn(values, **own)`` with ``values`` the
model's keyword arguments (the CLI's text already converted: an interval, comma lists, an absolute path).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal

import typer

from orchestrator.errors import TestbedError
from orchestrator.model.axes import Axis, AxisTable

Command = Literal["run", "sweep"]


def csv_list(text: str, what: str, cast: Callable[[str], Any]) -> list[Any]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise TestbedError(f"--{what}: give at least one value")
    try:
        return [cast(t) for t in items]
    except ValueError as exc:
        raise TestbedError(f"--{what}: {exc}") from exc


def _item_cast(axis: Axis) -> Callable[[str], Any]:
    choices = axis.choices
    base = type(choices[0]) if choices else axis.type
    return base if base in (int, float) else str


def _option(axis: Axis, command: Command) -> inspect.Parameter:
    listed = command == "sweep" and axis.sweep is not None
    if listed:
        assert axis.sweep is not None
        name, kind, default = axis.sweep.name, str, ",".join(str(v) for v in axis.sweep.default)
        help_text = axis.sweep.help
    else:
        name = axis.option or axis.name
        kind = axis.cli_type or axis.type
        default = axis.command_default
        help_text = axis.sweep_help if command == "sweep" and axis.sweep_help else axis.help
    decls = (axis.flag,) if kind is bool else ()  # a flag alone: --reset-board, no --no-reset-board
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[kind, typer.Option(*decls, help=help_text)])


def command_axes(table: AxisTable, command: Command) -> list[Axis]:
    return [a for a in table if a.option is not None and (a.in_run if command == "run" else a.in_sweep)]


def to_model(table: AxisTable, command: Command, given: dict[str, Any]) -> dict[str, Any]:
    """The command line's values as the model's keyword arguments."""
    values: dict[str, Any] = {}
    for axis in command_axes(table, command):
        if command == "sweep" and axis.sweep is not None:
            name = axis.sweep.name
            values[name] = csv_list(given[name], name, _item_cast(axis))
        else:
            value = given[axis.option or axis.name]
            values[axis.name] = axis.from_cli(value) if axis.from_cli else value
    return values


def with_axis_options(fn: Callable[..., None], table: AxisTable, command: Command) -> Callable[..., None]:
    """``fn(values, **own)`` as a typer command taking every axis option of ``command`` and ``fn``'s own."""
    axes = command_axes(table, command)
    own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
    params = [_option(a, command) for a in axes] + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    names = {p.name for p in params}
    if len(names) != len(params):
        raise ValueError(f"`{command}`: an option is declared twice")
    own_names = {p.name for p in own}

    def command_fn(**kwargs: Any) -> None:
        fn({k: v for k, v in kwargs.items() if k not in own_names}, **{k: kwargs[k] for k in own_names})

    base = fn.func if isinstance(fn, functools.partial) else fn
    command_fn.__name__, command_fn.__doc__ = base.__name__, base.__doc__  # the command's name and help
    command_fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command_fn.__annotations__ = {}
    return command_fn

