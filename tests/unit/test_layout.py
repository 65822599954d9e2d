"""The folder layout is the architecture: who may import what. (How big a file or function may grow is the
size rule, scripts/size_lint.py, run by `make check` and tests/unit/test_size_lint.py.)

The code is READ with ``ast``, never imported, so a rule holds for every module whatever it would
import at run time. The import graph counts every import: top-level and function-local,
``from pkg import sub`` when ``sub`` is a module, relative imports, the parent packages an import
runs (``import a.b.c`` runs ``a`` and ``a.b``), and ``importlib.import_module("...")`` with a
literal name. The rules are checked TRANSITIVELY over orchestrator's own modules, and a failure
names the chain of imports that breaks the rule.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "orchestrator"

# The outside world that model/ and analysis/ must not touch (top-level module names).
OUTSIDE_WORLD = {"subprocess", "docker", "ansible_runner", "pyshark"}
# Attributes that start programs or look them up, by module: used as `os.system(...)` or imported by name.
PROGRAM_ATTRS = {"os": {"system", "popen", "posix_spawn", "posix_spawnp", "spawnl", "spawnle", "spawnlp",
                        "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "execl", "execle", "execlp",
                        "execlpe", "execv", "execve", "execvp", "execvpe"},
                 "shutil": {"which"}}

@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    imports: set[str] = field(default_factory=set)  # every module name it imports (internal or not)
    program_attrs: set[str] = field(default_factory=set)  # "os.system", "shutil.which", ... it uses


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _resolve(mod: Module, level: int, target: str | None) -> str:
    """The absolute module name of a (possibly relative) ``from`` import."""
    if level == 0:
        return target or ""
    base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _with_parents(name: str) -> Iterator[str]:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])


class _ImportVisitor(ast.NodeVisitor):
    def __init__(self, mod: Module, known: set[str]) -> None:
        self.mod, self.known = mod, known
        self.aliases: dict[str, str] = {}  # local name -> module it is bound to

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.mod.imports.update(_with_parents(a.name))
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _resolve(self.mod, node.level, node.module)
        self.mod.imports.update(_with_parents(base))
        for a in node.names:
            full = f"{base}.{a.name}"
            if full in self.known:  # `from pkg import submodule`
                self.mod.imports.add(full)
                self.aliases[a.asname or a.name] = full
            if a.name in PROGRAM_ATTRS.get(base, ()):
                self.mod.program_attrs.add(full)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name):
            owner = self.aliases.get(node.value.id)
            if owner is not None and node.attr in PROGRAM_ATTRS.get(owner, ()):
                self.mod.program_attrs.add(f"{owner}.{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self.mod.imports.update(_with_parents(node.args[0].value))
        self.generic_visit(node)


def _source_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def build_graph() -> dict[str, Module]:
    modules = {}
    for path in _source_files():
        name, is_package = _module_name(path)
        modules[name] = Module(name, path, is_package)
    known = set(modules)
    for mod in modules.values():
        _ImportVisitor(mod, known).visit(ast.parse(mod.path.read_text(encoding="utf-8"), str(mod.path)))
        mod.imports.discard(mod.name)
    return modules


GRAPH = build_graph()


def _in(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _chains(start: str) -> Iterator[list[str]]:
    """For every orchestrator module reachable from ``start``: the shortest import chain to it."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        name = queue.popleft()
        chain = [name]
        while (up := parent[chain[-1]]) is not None:
            chain.append(up)
        yield chain[::-1]
        for dep in sorted(GRAPH[name].imports):
            if dep in GRAPH and dep not in parent:
                parent[dep] = name
                queue.append(dep)


def _violations(roots: Iterable[str], bad: Callable[[Module], list[str]]) -> list[str]:
    """``bad(module)`` lists what a module does wrong; each is reported once, with the shortest chain to it."""
    shortest: dict[tuple[str, str], list[str]] = {}
    for root in roots:
        for chain in _chains(root):
            for what in bad(GRAPH[chain[-1]]):
                key = (chain[-1], what)
                if key not in shortest or len(chain) < len(shortest[key]):
                    shortest[key] = chain
    return sorted(f"{' -> '.join(chain)}: {what}" for (_, what), chain in shortest.items())


def _roots(*packages: str) -> list[str]:
    roots = [n for n in GRAPH if _in(n, *packages)]
    assert roots, f"no module under {packages}: has the layout moved?"
    return roots


def _imports_of(mod: Module, match: Callable[[str], bool]) -> list[str]:
    """The module's imports that ``match`` (a parent package is left out when a submodule of it matches)."""
    found = {i for i in mod.imports if match(i)}
    return [f"imports {i}" for i in sorted(found) if not any(j.startswith(i + ".") for j in found)]


def test_the_graph_sees_every_kind_of_import() -> None:
    """The graph is only as good as its parser: a few imports known to be there must be found."""
    assert "orchestrator.analysis.pipeline" in GRAPH["orchestrator.analysis"].imports  # function-local
    assert "orchestrator.backends.process" in GRAPH["orchestrator.backends.tshark"].imports  # from x import y
    assert "orchestrator.model" in GRAPH["orchestrator.backends.tshark"].imports  # the parent package of model.export
    assert "subprocess" in GRAPH["orchestrator.backends.process"].imports
    assert "shutil.which" in GRAPH["orchestrator.backends.process"].program_attrs  # attribute use


@pytest.mark.parametrize("package", ["orchestrator.model", "orchestrator.analysis"])
def test_model_and_analysis_stay_pure(package: str) -> None:
    def bad(mod: Module) -> list[str]:
        found = _imports_of(mod, lambda i: _in(i, "orchestrator.backends") or i.split(".")[0] in OUTSIDE_WORLD)
        return found + [f"uses {a}" for a in sorted(mod.program_attrs)]

    offenders = _violations(_roots(package), bad)
    assert offenders == [], f"{package} must not touch the outside world (no backends, subprocess, os.system, " \
                            "shutil.which, docker, ansible_runner, pyshark):\n" + "\n".join(offenders)


def test_model_imports_nothing_from_the_outside_world_at_run_time() -> None:
    """The same rule seen from a fresh interpreter: third-party code model/ imports must not pull them in."""
    names = sorted(n for n in GRAPH if _in(n, "orchestrator.model"))
    code = (f"import importlib, sys\nfor n in {names!r}: importlib.import_module(n)\n"
            f"print(','.join(m for m in {sorted(OUTSIDE_WORLD)!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "", f"importing orchestrator.model loads {out.stdout.strip()}"


def test_clients_use_only_the_standard_library_and_paho() -> None:
    def bad(mod: Module) -> list[str]:
        return _imports_of(mod, lambda i: not (i.split(".")[0] in sys.stdlib_module_names or i.split(".")[0] == "paho"
                                               or _in(i, "orchestrator.clients") or i == "orchestrator"))

    offenders = _violations(_roots("orchestrator.clients"), bad)
    assert offenders == [], "orchestrator/clients/ runs inside the containers: standard library and paho only:\n" \
                            + "\n".join(offenders)


def test_report_reaches_no_backend() -> None:
    offenders = _violations(_roots("orchestrator.report"),
                            lambda mod: _imports_of(mod, lambda i: _in(i, "orchestrator.backends")))
    assert offenders == [], "orchestrator/report/ must not reach orchestrator/backends/:\n" + "\n".join(offenders)


def test_backends_reach_no_measure_lab_or_cli() -> None:
    above = ("orchestrator.measure", "orchestrator.lab", "orchestrator.cli")
    offenders = _violations(_roots("orchestrator.backends"), lambda mod: _imports_of(mod, lambda i: _in(i, *above)))
    assert offenders == [], "orchestrator/backends/ must not reach measure/, lab/ or cli/:\n" + "\n".join(offenders)
