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
    text = text.rstrip(".")
    if "*" in text:
        return any(REPO.glob(text))
    return (REPO / text).exists()


def module_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for attrs, end in enumerate(range(len(parts), 1, -1)):
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
