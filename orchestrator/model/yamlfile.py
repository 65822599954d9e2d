"""User input into pydantic models, with errors that name the file, line and field.

``load_model`` reads a user's YAML file (scenario, impairment profile; grading tables use
``read_yaml``); ``user_input`` turns the validation of other input (the CLI's options) into the
same kind of one-line TestbedError. ``Finite`` is the base of every model of such input: each of its
numbers is finite (YAML's ``.nan`` and ``.inf`` are numbers a range check lets through: NaN compares false
with every bound), refused by the field's name as "is not a finite number".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.errors import TestbedError

M = TypeVar("M", bound=BaseModel)
NOT_FINITE = "is not a finite number"


class Finite(BaseModel):
    """A model of user input: NaN and +-infinity are refused in every number field (float, int, and inside lists
    and mappings), before any range check; subclasses add their own config (extra, frozen), which pydantic merges."""

    model_config = ConfigDict(allow_inf_nan=False)


def error_text(err: Mapping[str, Any]) -> str:
    """One pydantic error's message as the user reads it (a rule's as it says it, a non-finite number by name)."""
    if err["type"] == "finite_number":
        return f"{NOT_FINITE} (got {err.get('input')})"
    if err["type"] == "extra_forbidden":
        return "unknown key"
    return str(err["msg"]).removeprefix("Value error, ") if err["type"] == "value_error" else str(err["msg"])

# A user's file is small: aliases that expand past this many nodes are refused (a "billion laughs" file would
# otherwise take the memory of the machine), as is an alias inside the node it names (a recursive structure).
MAX_EXPANDED_NODES = 100_000


def _check_aliases(path: Path, root: yaml.Node) -> None:
    """Refuse a node that contains itself through an alias, and aliases that expand past MAX_EXPANDED_NODES."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    while todo:
        node, children_done = todo.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[key] > MAX_EXPANDED_NODES:
                raise TestbedError(f"{path}:{node.start_mark.line + 1}: its aliases expand to more than "
                                   f"{MAX_EXPANDED_NODES:,} values", hint="write the values out instead")
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise TestbedError(f"{path}:{node.start_mark.line + 1}: an alias refers to a node that contains it "
                               "(a recursive structure)", hint="remove the self-referencing alias")
        open_nodes.add(key)
        todo.append((node, True))
        todo.extend((c, False) for c in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _line_index(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int]) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            _line_index(value_node, path + (key,), out)
            out[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_index(item, path + (i,), out)


def read_yaml(path: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse ``path``; return the data and a map from field path to line number."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TestbedError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TestbedError(f"{path}: not a UTF-8 text file (byte {exc.start} is 0x{exc.object[exc.start]:02x})",
                           hint="save it as UTF-8 YAML") from exc
    try:
        node = yaml.compose(text)
        if node is not None:
            _check_aliases(path, node)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise TestbedError(f"{where}: invalid YAML: {exc.problem}") from exc
    except yaml.reader.ReaderError as exc:  # control characters: a binary file that happens to decode
        raise TestbedError(f"{path}: not a text file (character #x{exc.character:04x} at position "
                           f"{exc.position})", hint="save it as UTF-8 YAML") from exc
    except yaml.YAMLError as exc:
        raise TestbedError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from exc
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _line_index(node, (), lines)
    return data, lines


def describe_validation_error(exc: ValidationError, source: str,
                              lines: dict[tuple[Any, ...], int] | None = None) -> str:
    """One line per problem: ``file:line: field: message`` (a whole object's problem without a field; a rule's
    message as it says it, without pydantic's "Value error, ")."""
    parts = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc)
        line = None
        if lines:
            for n in range(len(loc), -1, -1):
                if loc[:n] in lines:
                    line = lines[loc[:n]]
                    break
        where = f"{source}:{line}" if line else source
        msg = error_text(err)
        parts.append(f"{where}: {field}: {msg}" if field else f"{where}: {msg}")
    return "\n".join(parts)


@contextmanager
def user_input(what: str) -> Iterator[None]:
    """Validation of ``what`` (e.g. "run parameters") in the block becomes one TestbedError.

    A pydantic ValidationError gives ``invalid <what>: <field>: <message>`` (every problem in the
    evidence when there are several); a ValueError (e.g. from parse_interval) its own message.
    """
    try:
        yield
    except ValidationError as exc:
        problems = describe_validation_error(exc, what).splitlines()
        first = problems[0].removeprefix(f"{what}: ")
        raise TestbedError(f"invalid {what}: {first}",
                           evidence="\n".join(problems) if len(problems) > 1 else None) from exc
    except ValueError as exc:
        raise TestbedError(f"invalid {what}: {exc}") from exc


def load_model(model: type[M], path: Path) -> M:
    """Read ``path`` as YAML and validate it as ``model``; TestbedError on any problem."""
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise TestbedError(f"{path}: expected a mapping of keys at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TestbedError(f"{path}: invalid {model.__name__.lower()}",
                           evidence=describe_validation_error(exc, str(path), lines)) from exc
