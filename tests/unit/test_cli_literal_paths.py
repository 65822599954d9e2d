"""Paths and messages are printed as they are: `[...]` in a user's path is not read as terminal markup."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main


@pytest.mark.parametrize("name", ["[red]x[/red].yaml", "runs[1]/s.yaml", "[bold]"])
def test_a_path_with_brackets_is_printed_literally(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   name: str) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("name: [x\n", encoding="utf-8")  # invalid YAML: the error names the file

    code = main(["run", "--scenario", str(path), "--out", str(tmp_path / "out")])

    err = capsys.readouterr().err
    assert code == 1, err
    assert f"error: {path}:2: invalid YAML" in err, err
    assert "internal error" not in err


def test_an_archive_path_with_brackets_is_printed_literally(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    missing = tmp_path / "bundle[1].tar.gz"
    code = main(["verify", str(missing)])
    err = capsys.readouterr().err
    assert code != 0
    assert "bundle[1].tar.gz" in err, err
