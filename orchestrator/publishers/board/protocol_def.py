"""The device programs' option table, firmware/platformio/lib/testbed_core/src/device_options.def, read as the C++
preprocessor reads it: the entries in file order, each with the programs that take it (the ``#define TB_PROGRAMS``
line above it). The board's entries are the RUN body's keys (protocol.py ``run_keys``), so the Python side of the
serial protocol writes them nowhere itself.

The .def is read from the testbed's tree (orchestrator/paths.py ``tree``: the checkout, or the installed package's
data), when first asked for.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.paths import tree

DEF_IN_REPO = Path("firmware/platformio/lib/testbed_core/src/device_options.def")
UINT64_MAX = 2**64 - 1
_ENTRY = re.compile(r"^TB_OPT_(UINT|MS|ENUM|TEXT|FLAG)\((.*)\)\s*$")
_PROGRAMS = re.compile(r"^#define TB_PROGRAMS (\S+)\s*$")
_ARG = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[^,]+?)\s*(?:,|$)')
_PROGRAM_BITS = {"TB_VDEVICE": "vdevice", "TB_FLEET": "fleet", "TB_BOARD": "board"}


@dataclass(frozen=True)
class DefOption:
    name: str
    kind: str  # uint, ms, enum, text, flag
    min: int | float | None
    max: int | float | None
    default: int | float | str
    choices: tuple[str, ...] | None
    programs: tuple[str, ...]

    def as_json(self) -> dict[str, object]:
        """What `vdevice --describe-options` prints for this entry."""
        return {"name": self.name, "kind": self.kind, "min": self.min, "max": self.max, "default": self.default,
                "choices": list(self.choices) if self.choices is not None else None,
                "programs": list(self.programs)}


def def_path() -> Path:
    return tree() / DEF_IN_REPO


def _number(literal: str) -> int | float:
    if literal == "UINT64_MAX":
        return UINT64_MAX
    return int(literal) if re.fullmatch(r"\d+", literal) else float(literal)


def _text(literal: str) -> str:
    assert literal.startswith('"') and literal.endswith('"'), literal
    return literal[1:-1]


def _entry(kind: str, args: list[str], programs: tuple[str, ...]) -> DefOption:
    name = args[0]
    if kind in ("UINT", "MS"):
        lo, hi, default = (_number(a) for a in args[1:4])
        return DefOption(name, kind.lower(), lo, hi, default, None, programs)
    if kind == "ENUM":
        return DefOption(name, "enum", None, None, _text(args[2]), tuple(_text(args[1]).split("|")), programs)
    if kind == "TEXT":
        return DefOption(name, "text", None, None, _text(args[1]), None, programs)
    return DefOption(name, "flag", 0, 1, 0, None, programs)


def read_def(path: Path | None = None) -> list[DefOption]:
    """The entries in file order (path: another copy of the .def; None: the source tree's)."""
    programs: tuple[str, ...] = ()
    out: list[DefOption] = []
    for line in (path or def_path()).read_text().splitlines():
        m = _PROGRAMS.match(line)
        if m:
            bits = set(m.group(1).split("|"))
            programs = tuple(name for bit, name in _PROGRAM_BITS.items() if bit in bits)
            continue
        m = _ENTRY.match(line)
        if m:
            args = [a for a in _ARG.findall(m.group(2)) if a]
            out.append(_entry(m.group(1), args, programs))
    return out


def board_options(path: Path | None = None) -> tuple[DefOption, ...]:
    """The board's entries (its RUN body keys), in file order."""
    return tuple(o for o in read_def(path) if "board" in o.programs)


@functools.cache
def board_keys() -> tuple[str, ...]:
    """The RUN body keys of the source tree's .def, in its order (read once)."""
    return tuple(o.name for o in board_options())


def default(option: DefOption) -> int | float | str | None:
    """The entry's default, or None when it has none ("" for text; a number outside its range: the program decides)."""
    if option.kind in ("uint", "ms"):
        assert isinstance(option.default, int | float) and option.min is not None and option.max is not None
        return option.default if option.min <= option.default <= option.max else None
    return option.default if option.default != "" else None


@functools.cache
def board_defaults() -> dict[str, int | float | str | None]:
    """The board's keys of the source tree's .def with their defaults (None: none)."""
    return {o.name: default(o) for o in board_options()}


def fingerprint(options: tuple[DefOption, ...]) -> str:
    """What a board flashed with these entries accepts, as 12 hex digits: every key's name, kind, range, choices and
    default, in order. Two builds with the same fingerprint take the same RUN bodies alike."""
    text = "\n".join(f"{o.name} {o.kind} {o.min} {o.max} {o.default!r} {o.choices}" for o in options)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
