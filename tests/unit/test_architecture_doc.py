"""docs/architecture.md names only what exists, and its layers are the ones tests/unit/test_layers.py enforces.

Read from the doc: every path of ours (the pattern of tests/unit/test_docs_name_real_files.py) must exist; every
`PATH:Name` must name a file that defines Name (Python read with ``ast``: a top-level definition, or ``Class.member``;
C++ and the .def by a regex for a declaration); every other `name` in backticks that looks like code must be defined
in one of the files the doc cites, or be one of the doc's words for the axis table's fields and commands; the layer
line and the layer table must be test_layers.LAYERS, in order; each recipe lists files that exist.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from orchestrator.model.axes import AXES
from tests.unit.test_docs_name_real_files import PATH_RE
from tests.unit.test_layers import LAYERS

REPO = Path(__file__).resolve().parents[2]
DOC = Path("docs/architecture.md")
CITED = re.compile(r"`([\w./*-]+\.[A-Za-z]+):([A-Za-z_][\w.:]*)`")
BARE = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\(\))?`")
RECIPES = ("Add a device option", "Add a metric", "Add an event")
PYTHON = (".py",)
CPP = (".h", ".cpp", ".def")
NOT_A_TYPE = {"explicit", "return", "else", "case", "throw", "new", "delete", "not", "and", "or", "sizeof", "goto"}


@functools.cache
def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@functools.cache
def python_names(path: Path) -> frozenset[str]:
    """Top-level definitions, and ``Class.member`` for the members of top-level classes."""
    names: set[str] = set()

    def targets(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return [node.name]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        return []

    for node in ast.parse(read(path)).body:
        names.update(targets(node))
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}.{m}" for child in node.body for m in targets(child))
            names.update(m for child in node.body for m in targets(child))  # a member, as a bare name
    return frozenset(names)


@functools.cache
def without_comments(text: str) -> str:
    """C++ with its comments and string literals blanked."""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"', " ", text, flags=re.S)


def cpp_defines(text: str, name: str) -> bool:
    """Whether C++ source (or the .def) declares ``name``: a type, a macro, a .def entry, a function or a variable
    (``A::b``: a member function defined out of its class)."""
    n, text = re.escape(name), without_comments(text)
    if "::" in name:
        return re.search(rf"\b{n}\s*\(", text) is not None
    patterns = (rf"\b(?:struct|class|enum(?:\s+class)?|namespace|union)\s+{n}\b", rf"#define\s+{n}\b",
                rf"\bTB_OPT_[A-Z]+\(\s*{n}\s*[,)]")
    if any(re.search(p, text) for p in patterns):
        return True
    # a function or a variable: NAME after a type (a word, >, * or &), not after a keyword that makes it a use
    typed = re.finditer(rf"(\w+|[>*&])[ \t]+(?:\w+::)*{n}\s*[(=;\[{{]", text)
    return any(m.group(1) not in NOT_A_TYPE for m in typed)


def defines(root: Path, rel: str, name: str) -> bool:
    path = root / rel
    if path.suffix in PYTHON:
        return name in python_names(path)
    if path.suffix in CPP:
        return cpp_defines(read(path), name)
    return re.search(rf"\b{re.escape(name)}\b", read(path)) is not None


def exists(root: Path, rel: str) -> bool:
    rel = rel.rstrip(".")
    return any(root.glob(rel)) if "*" in rel else (root / rel).exists()


def missing_paths(root: Path, text: str) -> list[str]:
    return sorted({m for m in PATH_RE.findall(text) if not exists(root, m)})


def missing_names(root: Path, text: str) -> list[str]:
    """`PATH:Name` citations whose file does not exist or does not define Name."""
    out = []
    for rel, name in CITED.findall(text):
        if not exists(root, rel):
            out.append(f"{rel}:{name} (no such file)")
        elif not defines(root, rel, name):
            out.append(f"{rel}:{name} (not defined there)")
    return sorted(set(out))


def cited_files(root: Path, text: str) -> list[Path]:
    files = {p for m in PATH_RE.findall(text) for p in (root.glob(m) if "*" in m else [root / m.rstrip(".")])}
    return sorted(p for p in files if p.is_file() and p.suffix != ".md")


def undefined_bare_names(root: Path, text: str, words: frozenset[str] = frozenset()) -> list[str]:
    """`name` or `name()` in backticks that no file the doc cites defines (a .py or C++ file: a definition; another
    file, such as compose/testbed.yml: the word), unless it is one of ``words`` (an axis's name)."""
    files = cited_files(root, text)
    out = []
    for name in sorted(set(BARE.findall(text)) - words):
        if not any(defines(root, str(f.relative_to(root)), name) for f in files):
            out.append(name)
    return out


def layer_names() -> list[str]:
    """test_layers.LAYERS as the doc names them: 'base', then each layer's first package's last part."""
    return ["base" if packages[0] == "orchestrator" else packages[0].rsplit(".", 1)[1] for packages in LAYERS]


def layer_paths(root: Path) -> list[set[str]]:
    """test_layers.LAYERS as paths: the top package's own modules are orchestrator/*.py."""
    out = []
    for packages in LAYERS:
        paths = set()
        for package in packages:
            rel = package.replace(".", "/")
            paths.add("orchestrator/*.py" if package == "orchestrator" else
                      rel + "/" if (root / rel).is_dir() else rel + ".py")
        out.append(paths)
    return out


def doc_layer_line(text: str) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines() if re.fullmatch(r"\s*\w+( < \w+)+\s*", ln)]
    assert len(lines) == 1, f"the doc should have exactly one layer line (a < b < ...), found {lines}"
    return lines[0].split(" < ")


def doc_layer_table(text: str) -> list[tuple[str, set[str]]]:
    rows = []
    for ln in text.splitlines():
        cols = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("| ") and len(cols) >= 3 and cols[0] not in ("layer",) and not cols[0].startswith("-"):
            rows.append((cols[0], set(re.findall(r"`([^`]+)`", cols[1]))))
    return rows


def recipes(text: str) -> dict[str, list[str]]:
    """The numbered items of each `### Add ...` section, each item's text whole (its continuation lines too)."""
    out: dict[str, list[str]] = {}
    section = None
    for ln in text.splitlines():
        if ln.startswith("#"):
            title = ln.lstrip("#").strip()
            section = title if ln.startswith("### ") and title.startswith("Add ") else None
            if section:
                out[section] = []
        elif section is not None:
            if re.match(r"\d+\. ", ln):
                out[section].append(ln)
            elif ln.startswith("   ") and out[section] and ln.strip():
                out[section][-1] += " " + ln.strip()
    return out


def text() -> str:
    return (REPO / DOC).read_text(encoding="utf-8")


def test_every_path_in_the_doc_exists() -> None:
    assert missing_paths(REPO, text()) == []


def test_every_cited_name_is_defined_where_the_doc_says() -> None:
    assert CITED.findall(text()), "the doc cites no PATH:Name: has its citation form changed?"
    assert missing_names(REPO, text()) == []


def test_every_name_in_backticks_is_defined_in_a_cited_file() -> None:
    assert undefined_bare_names(REPO, text(), frozenset(a.name for a in AXES)) == []


def test_the_layers_are_the_enforced_ones() -> None:
    assert doc_layer_line(text()) == layer_names()
    table = doc_layer_table(text())
    assert [name for name, _ in table] == layer_names()
    assert [paths for _, paths in table] == layer_paths(REPO)


def test_each_recipe_lists_files_that_exist() -> None:
    found = recipes(text())
    assert sorted(found) == sorted(RECIPES)
    for title, items in found.items():
        assert items, f"recipe {title!r} lists no step"
        for item in items:
            paths = PATH_RE.findall(item)
            assert paths, f"recipe {title!r}: a step names no file: {item}"
            assert [p for p in paths if not exists(REPO, p)] == [], f"recipe {title!r}: {item}"


def test_the_checks_see_a_missing_file_and_name(tmp_path: Path) -> None:
    """The checks themselves, on a tree made for them: a renamed file, a name that moved, a bare name nowhere. (The
    top folder is spelled apart, so that test_docs_name_real_files does not read these made-up paths as ours.)"""
    top = "orchestrator"
    (tmp_path / top).mkdir()
    (tmp_path / top / "kept.py").write_text("class Kept:\n    member: int = 1\n\ndef here():\n    pass\n")
    (tmp_path / top / "core.h").write_text("struct Config {\n  int inflight;\n};\nint parse(int x);\n"
                                           "int use() { return called(1); }\n")
    doc = (f"`{top}/kept.py:Kept.member` `{top}/kept.py:here` `{top}/core.h:Config` `{top}/core.h:parse` "
           f"`{top}/core.h:inflight` `here()` `parse`\n")
    assert missing_paths(tmp_path, doc) == [] and missing_names(tmp_path, doc) == []
    assert undefined_bare_names(tmp_path, doc) == []
    renamed = doc + (f"`{top}/gone.py:here` {top}/gone.py `{top}/kept.py:there` `elsewhere()` "
                     f"`{top}/core.h:called`\n")
    assert missing_paths(tmp_path, renamed) == [f"{top}/gone.py"]
    assert missing_names(tmp_path, renamed) == [f"{top}/core.h:called (not defined there)",
                                                f"{top}/gone.py:here (no such file)",
                                                f"{top}/kept.py:there (not defined there)"]
    assert undefined_bare_names(tmp_path, renamed + "`called`\n") == ["called", "elsewhere"]  # used, not defined
