"""The project's own docs and comments name only files and modules that exist.

Every path of ours named in a tracked text file (README, docs/, docstrings and comments, playbooks,
Dockerfiles, the firmware) must exist, and every dotted module name of ours (orchestrator.<package>.<module>)
must resolve to a module (a last component may be an attribute of it). A move that forgets a doc fails here.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOP = ("orchestrator", "compose", "images", "playbooks", "firmware", "docs", "tests", "bench", "scripts")
PATH_RE = re.compile(r"(?<![\w/.$-])(?:" + "|".join(TOP) + r")/[A-Za-z0-9_./*-]*[A-Za-z0-9_*]")
MODULE_RE = re.compile(r"(?<![\w/.])orchestrator(?:\.[a-z_][a-z0-9_]*)+")
TEXT_SUFFIXES = {".md", ".py", ".yml", ".yaml", ".toml", ".sh", ".cpp", ".h", ".ini", ".cfg", ".txt", ".json"}
SKIP = ("tests/golden/expected/", "tests/fixtures/")
PACKAGED_TREE = "orchestrator/_tree/"  # in the wheel, the checkout's own compose/, images/, ... (setup.py maps them)


def tracked_text_files() -> list[Path]:
    listing = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    files = []
    for rel in listing.stdout.splitlines():
        if rel.startswith(SKIP):
            continue
        path = REPO / rel
        if path.suffix in TEXT_SUFFIXES or path.name in ("Makefile", "Dockerfile", "run") or rel.startswith(".ci/"):
            files.append(path)
    return files


def looks_like_ours(text: str) -> bool:
    """A file (the last part has a suffix), a folder (ends in /) or a deeper path; not an MQTT topic like bench/t."""
    last = text.rstrip("/").rsplit("/", 1)[-1]
    return text.endswith("/") or "." in last or "*" in last or text.count("/") >= 2


def path_exists(text: str) -> bool:
    text = text.rstrip(".").removeprefix(PACKAGED_TREE)
    if "*" in text:
        return any(REPO.glob(text))
    return (REPO / text).exists()


def module_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[:2] == ["orchestrator", "_tree"]:  # a folder of the tree as the wheel's package (PACKAGED_TREE)
        return len(parts) == 2 or REPO.joinpath(*parts[2:]).is_dir()
    for attrs, end in enumerate(range(len(parts), 0, -1)):
        base = REPO.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return attrs <= 1
    return False


def names_that_do_not_exist(pattern: re.Pattern[str], exists: Callable[[str], bool]) -> list[str]:
    """file:line: name, for every match of ``pattern`` in a tracked text file that ``exists`` refuses."""
    missing = []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), start=1):
            missing += [f"{path.relative_to(REPO)}:{lineno}: {m}" for m in pattern.findall(line) if not exists(m)]
    return missing


def test_every_named_path_exists() -> None:
    missing = names_that_do_not_exist(PATH_RE, lambda m: not looks_like_ours(m) or path_exists(m))
    assert missing == [], "names of files that do not exist:\n" + "\n".join(missing)


def test_every_named_module_exists() -> None:
    missing = names_that_do_not_exist(MODULE_RE, module_exists)
    assert missing == [], "names of modules that do not exist:\n" + "\n".join(missing)


WHERE = "## Where things live"
FEATURES = ("Events", "Fleet", "A lab across hosts", "A board", "Connection lifecycle", "Device stacks",
            "Impairments", "The report")
SOURCE_NAME = re.compile(r"(?<![\w/.`-])([\w-]+(?:/[\w-]+)*(?:\.(?:py|yml|yaml|sh|h|cpp|def)\b|/(?=[\s,;:)]|$)))")


def readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert title in text, f"README.md has no {title!r}"
    return text.split(title, 1)[1].split("\n## ", 1)[0]


def unknown_names_in_the_map(section: str) -> list[str]:
    """The folder map's own names (render.py, board/, lab.yml ...), which the paths' pattern does not take: each must
    be in the folder of its line, or a path under orchestrator/ or the repository."""
    block = section.split("```", 2)[1]
    missing, folder = [], REPO
    for line in block.splitlines():
        head = line.split(" ", 1)[0]
        if head and not line.startswith(" "):
            folder = REPO / head.split(",")[0] if (REPO / head.split(",")[0]).is_dir() else REPO
            line = line[len(head):]
        for name in SOURCE_NAME.findall(line):
            if not any((base / name).exists() for base in (folder, REPO / "orchestrator", REPO)):
                missing.append(f"{folder.relative_to(REPO)}: {name}")
    return missing


def test_where_things_live_names_every_features_real_files() -> None:
    section = readme_section(WHERE)
    assert unknown_names_in_the_map(section) == []
    bullets = {m.group(1): m.group(2) for m in re.finditer(r"^- \*\*(.+?)\*\*(.*(?:\n  .*)*)", section, re.M)}
    assert set(FEATURES) <= set(bullets), f"features without their files: {set(FEATURES) - set(bullets)}"
    for feature, text in bullets.items():
        paths = [m for m in PATH_RE.findall(text) if looks_like_ours(m)]
        assert paths, f"{feature}: names no file"
        assert [p for p in paths if not path_exists(p)] == [], feature
