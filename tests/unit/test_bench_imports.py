"""bench/'s scripts import each other by bare name (running a script puts its folder, bench/, on the
path); no cycle among them (fleet_loader and paho_loader had one: what both need is in loader_common)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def sibling_imports() -> dict[str, set[str]]:
    names = {p.stem for p in BENCH.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in BENCH.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
        graph[path.stem] = (found & names) - {path.stem}
    return graph


def cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    def walk(name: str, chain: list[str]) -> list[str] | None:
        for dep in sorted(graph[name]):
            if dep == start:
                return [*chain, dep]
            if dep not in chain:
                found = walk(dep, [*chain, dep])
                if found:
                    return found
        return None

    return walk(start, [start])


def test_the_graph_sees_the_sibling_imports() -> None:
    graph = sibling_imports()
    assert "loader_common" in graph["paho_loader"] and "loader_common" in graph["fleet_loader"]
    assert "paho_loader" in graph["fleet_loader"]  # function-local, for --paho-worker


def test_no_import_cycle_in_bench() -> None:
    graph = sibling_imports()
    cycles = [" -> ".join(c) for name in sorted(graph) if (c := cycle_from(graph, name))]
    assert cycles == [], "import cycles in bench/:\n" + "\n".join(cycles)
