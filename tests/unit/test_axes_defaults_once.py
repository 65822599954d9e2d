"""No axis default is restated outside the axis table (orchestrator/model/axes.py).

An axis's default written again as a literal beside its name (``spec.qos == 0``, ``.get("connection",
"persistent")``, ``s.get("inflight", 1) != 1``) goes stale silently the day the table's default changes; code asks
the table instead (``AXES.value(values, "qos")``, ``AXES.is_default(values, "inflight")``, the table's named
``NO_IMPAIRMENT`` and ``PERSISTENT``). The test reads every module of orchestrator/ (AST) and finds each place an
axis's name (an attribute ``x.qos``, a key ``x["qos"]``, ``x.get("qos", ...)`` or ``AXES.value(x, "qos")``) meets
that axis's default as a literal: the fallback of ``.get``, or the other side of ``==``, ``!=`` or ``>``.

``MEANS_THE_VALUE`` lists the few comparisons that ask for a value for what it does, not for being the default
(a fleet is more than one device, whatever the default); each is the exact source text with its reason, and an
entry that no longer matches fails, so the list cannot go stale. orchestrator/clients/ is not read: it imports
the standard library and paho only (tests/unit/test_layout.py), so it cannot ask the table.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from orchestrator.model.axes import AXES, REQUIRED

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"
NOT_READ = ROOT / "clients"
MEANS_THE_VALUE = {
    ("orchestrator/model/run.py", "self.devices > 1"): "is_fleet: more than one device",
    ("orchestrator/model/sweep.py", 'self.order == "blocked"'): "the blocked order's own way of ordering cells",
    ("orchestrator/measure/run.py", "spec.qos > 0"): "QoS 1 and 2 messages are what a broker keeps",
    ("orchestrator/report/figures.py", "c.record.repeat > 1"): "a cell's repeat index, not the sweep's count",
    ("orchestrator/analysis/keying.py", "devices: int = 1"): "the keying of one device (a fleet has its own)",
}
# An axis's default worth looking for: a literal that says something (None and False are everywhere).
DEFAULTS: dict[str, Any] = {a.name: a.default for a in AXES
                            if a.default is not REQUIRED and a.default is not None and a.default is not False
                            and not (isinstance(a.default, str) and a.default == "")}


def _named(node: ast.AST) -> str | None:
    """The axis a node reads: ``x.qos``, ``x["qos"]``, ``x.get("qos"[, ...])``."""
    if isinstance(node, ast.Attribute) and node.attr in DEFAULTS:
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in DEFAULTS:
        return str(node.slice.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "value"):
        key = node.args[0 if node.func.attr == "get" else 1] if len(node.args) > (node.func.attr == "value") else None
        if isinstance(key, ast.Constant) and key.value in DEFAULTS:
            return str(key.value)
    return None


def _same(node: ast.AST, default: Any) -> bool:
    return (isinstance(node, ast.Constant) and type(node.value) is type(default) and node.value == default) or (
        isinstance(node, ast.Constant) and isinstance(default, float) and type(node.value) is int
        and float(node.value) == default)


def restatements(source: str, where: str, allowed: set[tuple[str, str]] | None = None) -> list[str]:
    """Each restatement as ``where:line: what``; ``allowed`` collects the MEANS_THE_VALUE entries it met."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and len(node.args) == 2 and (name := _named(node)) \
                and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _same(node.args[1], DEFAULTS[name]):
            found.append(f"{where}:{node.lineno}: .get({name!r}, {DEFAULTS[name]!r})")
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in DEFAULTS \
                and node.value is not None and _same(node.value, DEFAULTS[node.target.id]):
            text = ast.get_source_segment(source, node) or ""
            if (where, text) in MEANS_THE_VALUE:
                (allowed if allowed is not None else set()).add((where, text))
            else:
                found.append(f"{where}:{node.lineno}: {node.target.id} = {DEFAULTS[node.target.id]!r}")
        if isinstance(node, ast.arguments):
            named = [*node.posonlyargs, *node.args][-len(node.defaults):] if node.defaults else []
            pairs = [*zip(named, node.defaults, strict=True), *zip(node.kwonlyargs, node.kw_defaults, strict=True)]
            found += [f"{where}:{arg.lineno}: {arg.arg}={DEFAULTS[arg.arg]!r}" for arg, default in pairs
                      if default is not None and arg.arg in DEFAULTS and _same(default, DEFAULTS[arg.arg])]
        if isinstance(node, ast.Compare) and all(isinstance(op, ast.Eq | ast.NotEq | ast.Gt) for op in node.ops):
            sides = [node.left, *node.comparators]
            for name in [n for n in map(_named, sides) if n]:
                if any(_same(s, DEFAULTS[name]) for s in sides):
                    text = ast.get_source_segment(source, node) or ""
                    if (where, text) in MEANS_THE_VALUE:
                        (allowed if allowed is not None else set()).add((where, text))
                        continue
                    found.append(f"{where}:{node.lineno}: {name} compared with {DEFAULTS[name]!r}")
    return found


def test_no_axis_default_is_restated_outside_the_table() -> None:
    allowed: set[tuple[str, str]] = set()
    found = [hit for path in sorted(ROOT.rglob("*.py")) if NOT_READ not in path.parents
             for hit in restatements(path.read_text(), str(path.relative_to(ROOT.parent)), allowed)]
    assert not found, "axis defaults restated (ask orchestrator/model/axes.py instead):\n" + "\n".join(found)
    stale = set(MEANS_THE_VALUE) - allowed
    assert not stale, f"MEANS_THE_VALUE entries that match nothing: {stale}"


def test_the_scan_finds_what_it_looks_for() -> None:
    source = ('a = spec.qos == 0\nb = v.get("connection", "persistent")\nc = s.get("inflight", 1) != 1\n'
              'd = x["mqtt"] != "3.1.1"\ne = spec.qos == 1\nf = v.get("connection")\n'
              'g = AXES.value(v, "devices") > 1\nh = spec.devices < 1\n')
    assert sorted(h.split(": ", 1)[1] for h in restatements(source, "m")) == sorted([
        "qos compared with 0", ".get('connection', 'persistent')", ".get('inflight', 1)", "inflight compared with 1",
        "mqtt compared with '3.1.1'", "devices compared with 1"])
