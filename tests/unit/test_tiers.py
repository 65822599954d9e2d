"""The tiers: every entry of the `slow` table in tests/conftest.py names a test that exists (a renamed test would
otherwise slip back into `make check` unnoticed), and `make check` selects by the markers pytest declares."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import SLOW

REPO = Path(__file__).resolve().parents[2]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_slow_entry_names_a_test_that_exists() -> None:
    missing = []
    for key, why in SLOW.items():
        file, _, name = key.partition("::")
        path = REPO / file
        if not path.is_file() or (name and name.split("[")[0] not in _test_names(path)):
            missing.append(key)
        assert why.strip(), f"{key}: say why it is left to `make test`"
    assert missing == [], f"tests/conftest.py SLOW names tests that do not exist: {missing}"


def test_make_check_selects_only_declared_markers() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    selection = re.search(r"^CHECK_MARKERS := (.+)$", makefile, re.M)
    assert selection, "Makefile: CHECK_MARKERS is gone"
    used = set(re.findall(r"\b(?!not\b|and\b|or\b)(\w+)", selection.group(1)))
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    declared = set(re.findall(r'^\s*"(\w+): ', pyproject, re.M))
    assert used == {"docker", "netns", "slow"} and used <= declared, (used, declared)
