"""The layers of orchestrator/: no import cycle, and no import against the layer order.

    base (errors, paths, signals, waiting, clients) < model < results < backends < environment < analysis < lab
        < publishers < runanalysis < measure < report < doctor < cli

A module may import its own layer and the layers below it, never one above. The graph is the one
tests/unit/test_layout.py reads from the code (AST: top-level and function-local imports, relative ones,
``importlib.import_module`` with a literal name), so a lazy import inside a function counts as much as one at the
top. A cycle is a set of modules that reach each other through imports (an import of a module's own parent
package is not an edge: Python runs the parent first whatever the code says).
"""

from __future__ import annotations

import ast

from tests.unit.test_layout import GRAPH, REPO

# Lowest first. A package not named here fails test_every_module_has_a_layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("orchestrator", "orchestrator.errors", "orchestrator.paths", "orchestrator.signals", "orchestrator.waiting",
     "orchestrator.clients"),
    ("orchestrator.model", "orchestrator.scenarios", "orchestrator.impairments", "orchestrator.grading"),
    ("orchestrator.results",),
    ("orchestrator.backends",),
    ("orchestrator.environment",),
    ("orchestrator.analysis",),
    ("orchestrator.lab",),
    ("orchestrator.publishers",),
    ("orchestrator.runanalysis",),
    ("orchestrator.measure",),
    ("orchestrator.report",),
    ("orchestrator.doctor",),
    ("orchestrator.cli",),
)

# Imports against the order, allowed for now: {(importer, imported): why}. Keep it EMPTY; an entry that no
# longer occurs fails test_the_allow_list_is_current.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}


def layer_of(name: str) -> int | None:
    """The index in LAYERS of the most specific package holding ``name``."""
    best: tuple[int, int] | None = None  # (length of the matching package name, layer)
    for index, packages in enumerate(LAYERS):
        for package in packages:
            if (name == package or name.startswith(package + ".")) and (best is None or len(package) > best[0]):
                best = (len(package), index)
    return best[1] if best else None


def _is_parent(package: str, name: str) -> bool:
    return name.startswith(package + ".")


def edges() -> dict[str, set[str]]:
    """Every module's imports of orchestrator's own modules, without the edges to its own parent packages."""
    return {name: {d for d in mod.imports if d in GRAPH and not _is_parent(d, name)} for name, mod in GRAPH.items()}


def upward_imports(graph: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    found = {}
    for name, deps in graph.items():
        mine = layer_of(name)
        for dep in deps:
            theirs = layer_of(dep)
            if mine is not None and theirs is not None and theirs > mine:
                found[(name, dep)] = f"{name} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[theirs][0]}), a layer above"
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_every_module_has_a_layer() -> None:
    missing = sorted(name for name in GRAPH if layer_of(name) is None)
    assert missing == [], f"modules in no layer (add their package to LAYERS in {__file__}): {missing}"


def test_no_import_against_the_layer_order() -> None:
    found = upward_imports(edges())
    offenders = sorted(why for key, why in found.items() if key not in UPWARD_ALLOWED)
    assert offenders == [], "imports against the layer order (move the code down, or hand the upper layer's " \
                            "function in as an argument):\n" + "\n".join(offenders)


def test_the_allow_list_is_current() -> None:
    stale = sorted(set(UPWARD_ALLOWED) - set(upward_imports(edges())))
    assert stale == [], f"UPWARD_ALLOWED names imports that are gone (remove them): {stale}"


def test_no_import_cycle() -> None:
    found = cycles(edges())
    assert found == [], "import cycles (each line: modules that import each other, directly or not):\n" + \
                        "\n".join(" <-> ".join(c) for c in found)


def test_rendering_starts_no_work() -> None:
    """cli/render.py draws progress and results: of measure/ and doctor/ it takes the data types it draws (classes),
    never a function that would start a run, a sweep or a check (the command calls those and hands render the
    results)."""
    tree = ast.parse((REPO / "orchestrator" / "cli" / "render.py").read_text(encoding="utf-8"))
    taken = [(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
             and node.module.startswith(("orchestrator.measure", "orchestrator.doctor")) for a in node.names]
    assert taken, "render.py takes nothing from measure/: has it moved?"
    not_types = []
    for module, name in taken:
        source = ast.parse(GRAPH[module].path.read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.ClassDef) and n.name == name for n in source.body):
            not_types.append(f"{module}.{name}")
    assert not_types == [], f"cli/render.py imports what is not a data type from measure/ or doctor/: {not_types}"


def test_the_checks_see_a_known_cycle_and_an_upward_import() -> None:
    """The checks themselves, on a graph made for them."""
    graph = {"orchestrator.measure.a": {"orchestrator.measure.b", "orchestrator.cli.main"},
             "orchestrator.measure.b": {"orchestrator.measure.c"}, "orchestrator.measure.c": {"orchestrator.measure.a"},
             "orchestrator.cli.main": {"orchestrator.measure.a"}, "orchestrator.lab.x": {"orchestrator.model.y"},
             "orchestrator.model.y": set()}
    assert cycles(graph) == [["orchestrator.cli.main", "orchestrator.measure.a", "orchestrator.measure.b",
                              "orchestrator.measure.c"]]
    assert list(upward_imports(graph)) == [("orchestrator.measure.a", "orchestrator.cli.main")]
    assert layer_of("orchestrator.clients.payload") == 0 and layer_of("orchestrator.cli.main") == len(LAYERS) - 1
