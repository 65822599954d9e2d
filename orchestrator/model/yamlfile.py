"""Load a YAML file into a pydantic model with errors that name the file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import TestbedError

M = TypeVar("M", bound=BaseModel)


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
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise TestbedError(f"{where}: invalid YAML: {exc.problem}") from exc
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _line_index(node, (), lines)
    return data, lines


def describe_validation_error(exc: ValidationError, source: str,
                              lines: dict[tuple[Any, ...], int] | None = None) -> str:
    """One line per problem: ``file:line: field: message``."""
    parts = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        line = None
        if lines:
            for n in range(len(loc), -1, -1):
                if loc[:n] in lines:
                    line = lines[loc[:n]]
                    break
        where = f"{source}:{line}" if line else source
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{where}: {field}: {msg}")
    return "\n".join(parts)


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
