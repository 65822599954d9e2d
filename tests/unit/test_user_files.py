"""A user's scenario, impairment profile or grading table that is not UTF-8 text: one line naming the file.

Through the CLI: exit code 1, the message names the file, no internal error and no traceback; nothing
is started (each file is read before any container or cell).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import TestbedError
from orchestrator.model.yamlfile import read_yaml

NOT_TEXT = {
    "utf16": ("name: mine\ntransport: plain\n".encode("utf-16"), "not a UTF-8 text file (byte 0 is 0xff)"),
    "png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a UTF-8 text file (byte 0 is 0x89)"),
    "latin1": ("name: caf\xe9\n".encode("latin-1"), "not a UTF-8 text file (byte 9 is 0xe9)"),
    "nul": (b"name: x\n\x00\x01\x02\x03", "not a text file (character #x0000 at position 8)"),
}

# each kind of user file -> the command that reads it first (before anything starts)
KINDS = {
    "scenario": lambda path, out: ["run", "--scenario", str(path), "--out", str(out)],
    "impairment": lambda path, out: ["run", "--scenario", "plain", "--impairment", str(path), "--out", str(out)],
    "grading": lambda path, out: ["sweep", "--grading", str(path), "--out", str(out)],
}


@pytest.mark.parametrize("content", NOT_TEXT, ids=list(NOT_TEXT))
@pytest.mark.parametrize("kind", KINDS)
def test_a_file_that_is_not_utf8_text_is_one_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         kind: str, content: str) -> None:
    data, reason = NOT_TEXT[content]
    path = tmp_path / f"{kind}.yaml"
    path.write_bytes(data)
    out = tmp_path / "out"

    code = main(KINDS[kind](path, out))

    err = capsys.readouterr().err
    assert code == 1, err
    assert f"error: {path}: {reason}" in err.splitlines(), err
    assert "internal error" not in err and "Traceback" not in err
    assert not out.exists()


def test_read_yaml_keeps_its_errors_for_text(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: [x\n", encoding="utf-8")
    with pytest.raises(TestbedError, match=r"s\.yaml:2: invalid YAML"):
        read_yaml(path)
    path.write_bytes("\ufeffname: caf\xe9\n".encode())  # UTF-8 with a byte order mark is text
    assert read_yaml(path)[0] == {"name": "caf\xe9"}


def _laughs(levels: int) -> str:
    """A file whose aliases expand to 10**levels values while its text stays a few hundred bytes."""
    lines = ["name: laughs", "transport: plain", "a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


ALIASES = {
    "self-reference": ("name: loop\ntransport: plain\nextra: &x [1, *x]\n",
                       ":3: an alias refers to a node that contains it (a recursive structure)"),
    "billion-laughs": (_laughs(9), ":7: its aliases expand to more than 100,000 values"),
}


@pytest.mark.parametrize("case", ALIASES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_recursive_or_exploding_alias_is_refused_before_anything_starts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, case: str) -> None:
    text, reason = ALIASES[case]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"

    code = main(KINDS[kind](path, out))

    err = capsys.readouterr().err
    assert code == 1, err
    assert f"error: {path}{reason}" in err.splitlines(), err
    assert "internal error" not in err and "Traceback" not in err and "RecursionError" not in err
    assert not out.exists()


def test_aliases_that_stay_small_still_read(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("a: &a [1, 2]\nb: *a\nc: [*a, *a]\n", encoding="utf-8")
    assert read_yaml(path)[0] == {"a": [1, 2], "b": [1, 2], "c": [[1, 2], [1, 2]]}
