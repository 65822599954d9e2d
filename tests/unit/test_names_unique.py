"""One top-level name, one meaning: no two orchestrator modules define a class of the same name, or a public
(no leading ``_``) function of the same name, at module level. A newcomer who greps a name finds one thing.

Read with ``ast``, never imported. Names that are deliberately one protocol across modules are listed in
``ALLOWED`` with the modules that define them and why; an entry that no longer matches what the code defines
fails, so the list cannot go stale.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "orchestrator"

_LAYERS = "the `testbed` command (cli/main.py), the lab session it drives (lab/session.py) and the compose project"
# (kind, name) -> (the modules that define it, relative to orchestrator/; why they share the name)
ALLOWED: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("function", "main"): (frozenset({"backends/impairment/cli_plan.py", "cli/main.py", "clients/clock_probe.py",
                                      "clients/capacity.py", "clients/labhost.py", "clients/subscriber.py",
                                      "clients/time_echo.py"}),
                           "the entry point of a program run as `python -m` (or the `testbed` script)"),
    ("function", "build_parser"): (frozenset({"clients/labhost.py", "clients/subscriber.py", "clients/time_echo.py"}),
                                   "each client program's argparse parser, the one its main() parses with"),
    ("function", "builtin_names"): (frozenset({"model/impairment.py", "model/scenario.py"}),
                                    "a model's profiles shipped as package data, by name: the same question of each"),
    ("function", "up"): (frozenset({"cli/main.py", "lab/session.py", "backends/compose.py"}),
                         f"one operation at each layer: {_LAYERS} (backends/compose.py) it starts"),
    ("function", "down"): (frozenset({"cli/main.py", "lab/session.py", "backends/compose.py"}),
                           f"one operation at each layer: {_LAYERS} (backends/compose.py) it removes"),
    ("function", "status"): (frozenset({"cli/main.py", "lab/session.py"}),
                             "one operation at each layer: `testbed status` and the lab session's containers it lists"),
    ("function", "build"): (frozenset({"cli/firmware.py", "backends/platformio.py"}),
                            "one operation at each layer: `testbed firmware build` and the `pio run` it drives"),
    ("function", "upload"): (frozenset({"cli/firmware.py", "backends/platformio.py"}),
                             "one operation at each layer: `testbed firmware upload` and the `pio run -t upload` it "
                             "drives"),
    ("function", "register"): (frozenset({"cli/compare.py", "cli/demo.py"}),
                               "a command's module adds it to the `testbed` app (cli/main.py _register_subapps)"),
}


def top_level_names(root: Path = PACKAGE) -> dict[tuple[str, str], set[str]]:
    """(kind, name) -> the modules (relative to ``root``) defining it at module level."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                found[("class", node.name)].add(rel)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
                found[("function", node.name)].add(rel)
    return found


@functools.cache
def clashes(root: Path = PACKAGE) -> dict[tuple[str, str], set[str]]:
    return {key: mods for key, mods in top_level_names(root).items() if len(mods) > 1}


def test_no_top_level_name_means_two_things() -> None:
    found = clashes()
    unlisted = {f"{kind} {name}: {sorted(mods)}" for (kind, name), mods in found.items()
                if (kind, name) not in ALLOWED or frozenset(mods) != ALLOWED[(kind, name)][0]}
    assert not unlisted, ("one top-level name defined by several modules; rename so each says what it is "
                          f"(or, when they are one protocol, list it in ALLOWED with why): {sorted(unlisted)}")


def test_allow_list_is_not_stale() -> None:
    found = clashes()
    stale = [f"{kind} {name}" for (kind, name), (mods, _why) in ALLOWED.items() if found.get((kind, name)) != set(mods)]
    assert not stale, f"ALLOWED names a clash the code no longer has (remove or update it): {stale}"
    assert all(why.strip() for _mods, why in ALLOWED.values())


def test_the_check_sees_a_clash(tmp_path: Path) -> None:
    """The walk itself: two modules with one class name and one public function name are both found; a private
    function is not."""
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("class Thing:\n    pass\n\ndef helper():\n    pass\n\ndef _own():\n    pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text("async def helper():\n    pass\n")
    assert clashes(tmp_path) == {("class", "Thing"): {"a.py", "b.py"},
                                ("function", "helper"): {"a.py", "b.py", "sub/c.py"}}
