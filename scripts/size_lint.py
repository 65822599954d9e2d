#!/usr/bin/env python3
"""The size rule: no source file over 450 lines, no function over 60, in the Python of orchestrator/ and
bench/ and in the C++ of the firmware core (lib/testbed_core/src) and its host programs (host/src).

    python3 scripts/size_lint.py          # prints each breach and exits 1, or exits 0 silently

Python functions are read with ``ast``: a function counts from its ``def`` line to the last line of its body
(a nested function counts for itself and inside its parent). C++ functions are found by a brace scanner, not
a compiler: comments, string and character literals and preprocessor lines are blanked out first, then a
``{`` outside any function whose head (the text since the last ``;``, ``{`` or ``}``) ends in a parameter
list (``)`` and optionally ``const``/``noexcept``/``override``/``-> T`` or a constructor's initialiser list)
opens a function body; it counts from the first line of that head (template line included, an access
label excluded) to the line of the matching ``}``. Lambdas and blocks inside a function count as part of
it. A function whose braces sit in both arms of an ``#if`` would confuse it; a file whose braces do not
balance is reported, never passed.

Exceptions go in ALLOWED, each with the reason; an entry that names nothing over the limit is itself an
error, so the list cannot go stale.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 60
PYTHON_ROOTS = ("orchestrator", "bench")
CPP_ROOTS = ("firmware/platformio/lib/testbed_core/src", "firmware/platformio/host/src")
CPP_SUFFIXES = (".cpp", ".h", ".hpp", ".cc")

# {"path" (a file over MAX_FILE_LINES) or "path:Qualified.name" (a function over MAX_FUNCTION_LINES): "why"}.
# Keep it EMPTY unless a long file or function is truly clearer in one piece; say why in the value.
ALLOWED: dict[str, str] = {
    "firmware/platformio/lib/testbed_core/src/tb_error.cpp:err_name": (
        "a table, not logic: one `case Err::X: return \"X\";` line per error code, grown with the enum "
        "(a switch keeps the compiler's warning for a code without a name)"),
}


@dataclass(frozen=True)
class Breach:
    key: str  # "path" or "path:name"
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.key}: {self.lines} lines (limit {self.limit})"


# ------------------------------------------------------------------------------------------------ Python
def python_functions(source: str) -> Iterator[tuple[str, int]]:
    """(qualified name, lines from ``def`` to the end of its body) of every function and method."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + child.name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


# ------------------------------------------------------------------------------------------------ C++
_LITERAL_OR_COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|R"(?P<d>[^(\s]*)\(.*?\)(?P=d)"|"(?:\\.|[^"\\\n])*"'
                                 r"|'(?:\\.|[^'\\\n])*'", re.S)
_PREPROCESSOR = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_SCOPE_KEYWORD = re.compile(r"\b(namespace|class|struct|union|enum)\b")
_AFTER_PARAMS = re.compile(r"^\s*(?:(?:const|noexcept|override|final|mutable|volatile|&&|&)\s*)*(?:->[^;{}]*)?$")
_INIT_LIST = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")
_ACCESS_LABEL = re.compile(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+")


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def cpp_code(source: str) -> str:
    """The source with comments, literals and preprocessor lines blanked (newlines kept, so lines still count)."""
    return _PREPROCESSOR.sub(_blank, _LITERAL_OR_COMMENT.sub(_blank, source))


def _brace_kind(head: str) -> str:
    """What a ``{`` outside any function opens, from the text before it: function, member-init or scope."""
    if "(" not in head:
        return "scope"  # namespace, class, enum, extern "C", an initialiser without a call
    if _SCOPE_KEYWORD.search(head.split("(", 1)[0]) and not head.rstrip().endswith(")"):
        return "scope"  # struct X : Base<f(1)> {  (rare; a class head, not a body)
    if head.rstrip().endswith("="):
        return "scope"
    tail = head[head.rfind(")") + 1:]
    if ")" in head and _AFTER_PARAMS.match(tail):
        return "function"
    if _INIT_LIST.search(head):
        stripped = head.rstrip()
        # `Foo() : a_{1}, b_(2) {`: the body's brace follows a `)` or `}`; `a_{` is a member's initialiser
        return "function" if stripped.endswith((")", "}")) else "member-init"
    return "scope"


def _function_name(head: str) -> str:
    before = head.split("(", 1)[0].split()
    return before[-1] if before else "?"


def cpp_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every function body in a C++ source. Raises ValueError when braces do not
    balance (the scanner would be guessing)."""
    code = cpp_code(source)
    found: list[tuple[str, int, int]] = []
    stack: list[tuple[str, int, int]] = []  # (kind, head start offset, head start before this brace)
    head_start = 0
    in_function = 0  # depth of braces inside the innermost function body
    for i, ch in enumerate(code):
        if in_function:
            if ch == "{":
                in_function += 1
            elif ch == "}":
                in_function -= 1
                if in_function == 0:
                    kind, start, _ = stack.pop()
                    first = code.count("\n", 0, start) + 1
                    found.append((_function_name(code[start:i]), first, code.count("\n", 0, i) + 2 - first))
                    head_start = i + 1
            continue
        if ch == ";":
            head_start = i + 1
        elif ch == "{":
            head = code[head_start:i]
            label = _ACCESS_LABEL.match(head)
            start = head_start + (label.end() if label else 0)
            start += len(code[start:i]) - len(code[start:i].lstrip())
            kind = _brace_kind(head)
            stack.append((kind, start, head_start))
            if kind == "function":
                in_function = 1
            elif kind == "scope":
                head_start = i + 1
        elif ch == "}":
            if not stack:
                raise ValueError(f"unbalanced '}}' at line {code.count(chr(10), 0, i) + 1}")
            kind, _, before = stack.pop()
            head_start = before if kind == "member-init" else i + 1
    if stack or in_function:
        raise ValueError("unbalanced '{' (an #if with braces in both arms?)")
    return found


# ------------------------------------------------------------------------------------------------ the rule
def source_files(repo: Path = REPO) -> list[Path]:
    files = [p for root in PYTHON_ROOTS for p in (repo / root).rglob("*.py")]
    files += [p for root in CPP_ROOTS for p in (repo / root).rglob("*") if p.suffix in CPP_SUFFIXES]
    return sorted(p for p in files if p.is_file())


def functions(path: Path, text: str) -> list[tuple[str, int]]:
    if path.suffix == ".py":
        return list(python_functions(text))
    return [(name, lines) for name, _, lines in cpp_functions(text)]


def breaches(repo: Path = REPO) -> tuple[list[Breach], list[str]]:
    """(everything over a limit, files the scanner could not read)."""
    found, unreadable = [], []
    for path in source_files(repo):
        rel, text = path.relative_to(repo).as_posix(), path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > MAX_FILE_LINES:
            found.append(Breach(rel, n, MAX_FILE_LINES))
        try:
            found += [Breach(f"{rel}:{name}", n, MAX_FUNCTION_LINES)
                      for name, n in functions(path, text) if n > MAX_FUNCTION_LINES]
        except (ValueError, SyntaxError) as exc:
            unreadable.append(f"{rel}: {exc}")
    return found, unreadable


def check(repo: Path = REPO, allowed: dict[str, str] | None = None) -> list[str]:
    """Every problem as one line: breaches not allowed, allow-list entries that allow nothing, unreadable files."""
    allowed = ALLOWED if allowed is None else allowed
    found, unreadable = breaches(repo)
    problems = [f"too long (split it, or add it to ALLOWED with the reason): {b}" for b in found
                if b.key not in allowed]
    keys = {b.key for b in found}
    problems += [f"stale ALLOWED entry (nothing over the limit there; remove it): {k}" for k in allowed
                 if k not in keys]
    problems += [f"cannot scan: {u}" for u in unreadable]
    return problems


def main() -> int:
    problems = check()
    for line in problems:
        print(line)
    if problems:
        print(f"size rule: files <= {MAX_FILE_LINES} lines, functions <= {MAX_FUNCTION_LINES} lines "
              f"({', '.join(PYTHON_ROOTS + CPP_ROOTS)}); see scripts/size_lint.py", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
