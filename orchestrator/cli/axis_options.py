"""The options of `testbed run` and `testbed sweep`, made from the axis table (orchestrator/model/axes.py).

``with_axis_options(fn, table, "run")`` gives typer a command whose signature is every axis option of the
command followed by ``fn``'s own options (``--out`` ...); it calls ``fn(values, **own)`` with ``values`` the
model's keyword arguments (the CLI's text already converted: an interval, comma lists, an absolute path).
``with_run_options(fn, table, names)`` does the same with the `run` options of a few axes for another command
(`firmware build`, `up`, `board check`): the same names, units, defaults, help and ranges as `testbed run`, the
values checked as RunSpec checks them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import typer
from pydantic import ConfigDict, create_model

from orchestrator.errors import TestbedError
from orchestrator.model.axes import Axis, AxisTable
from orchestrator.model.run import axis_field
from orchestrator.model.yamlfile import user_input

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


def command_axes(table: AxisTable, command: Command, names: Sequence[str] | None = None) -> list[Axis]:
    """The axes with an option in ``command`` (``names``: only these, in the table's order)."""
    return [a for a in table if a.option is not None and (a.in_run if command == "run" else a.in_sweep)
            and (names is None or a.name in names)]


def to_model(table: AxisTable, command: Command, given: dict[str, Any],
             names: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line's values as the model's keyword arguments."""
    values: dict[str, Any] = {}
    for axis in command_axes(table, command, names):
        if command == "sweep" and axis.sweep is not None:
            name = axis.sweep.name
            values[name] = csv_list(given[name], name, _item_cast(axis))
        else:
            value = given[axis.option or axis.name]
            values[axis.name] = axis.from_cli(value) if axis.from_cli else value
    return values


def with_axis_options(fn: Callable[..., None], table: AxisTable, command: Command,
                      only: Sequence[str] | None = None) -> Callable[..., None]:
    """``fn(values, **own)`` as a typer command taking every axis option of ``command`` (``only``: of these
    axes) and ``fn``'s own."""
    axes = command_axes(table, command, only)
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



def checked(table: AxisTable, values: dict[str, Any], what: str) -> dict[str, Any]:
    """``values`` of a few axes checked as RunSpec checks them (type, range, choices, pattern): a TestbedError
    ``invalid <what>: ...`` names the first problem."""
    model = create_model("Options", __config__=ConfigDict(extra="forbid"),
                         **{name: axis_field(table[name]) for name in values})  # type: ignore[call-overload]
    with user_input(what):
        return model(**values).model_dump()


def with_run_options(fn: Callable[..., None], table: AxisTable, names: Sequence[str]) -> Callable[..., None]:
    """``fn(values, **own)`` as a typer command taking `testbed run`'s options of the axes ``names`` and ``fn``'s
    own; ``values`` are the axes' values by name, converted and checked (:func:`checked`)."""
    missing = set(names) - {a.name for a in command_axes(table, "run")}
    if missing:
        raise ValueError(f"not options of `run`: {', '.join(sorted(missing))}")

    def command_fn(given: dict[str, Any], **own: Any) -> None:
        fn(checked(table, to_model(table, "run", given, names), "options"), **own)

    command_fn.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return with_axis_options(functools.update_wrapper(command_fn, fn, updated=()), table, "run", names)
