"""process.which() and run()/stream(): programs in the sbin folders are found off an ordinary user's PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends import process
from orchestrator.backends.process import run, stream, which
from orchestrator.errors import TestbedError


def fake_program(folder: Path, name: str, says: str, mode: int = 0o755) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f'#!/bin/sh\necho "{says} $*"\n')
    path.chmod(mode)
    return path


@pytest.fixture
def user_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH is one temp folder (no sbin on it, as for a user on Debian); SBIN_DIRS two other temp folders."""
    on_path = tmp_path / "bin"
    on_path.mkdir()
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setattr(process, "SBIN_DIRS", (str(tmp_path / "sbin1"), str(tmp_path / "sbin2")))
    return on_path


def test_the_real_sbin_folders_are_searched_by_default() -> None:
    assert process.SBIN_DIRS == ("/usr/local/sbin", "/usr/sbin", "/sbin")


def test_a_program_only_in_an_sbin_folder_is_found_with_its_full_path(user_path: Path) -> None:
    tc = fake_program(user_path.parent / "sbin2", "tc-fake", "sbin")
    assert which("tc-fake") == str(tc)


def test_path_wins_over_the_sbin_folders(user_path: Path) -> None:
    fake_program(user_path.parent / "sbin1", "tc-fake", "sbin")
    on_path = fake_program(user_path, "tc-fake", "path")
    assert which("tc-fake") == str(on_path)


def test_a_file_that_is_not_executable_is_skipped(user_path: Path) -> None:
    fake_program(user_path.parent / "sbin1", "tc-fake", "not executable", mode=0o644)
    assert which("tc-fake") is None
    second = fake_program(user_path.parent / "sbin2", "tc-fake", "sbin2")
    assert which("tc-fake") == str(second)


def test_a_program_nowhere_is_none_and_a_path_with_a_slash_is_not_searched(user_path: Path) -> None:
    fake_program(user_path.parent / "sbin1", "tc-fake", "sbin")
    assert which("no-such-program-here") is None
    assert which("./tc-fake") is None


def test_run_executes_a_program_found_only_in_an_sbin_folder(user_path: Path) -> None:
    fake_program(user_path.parent / "sbin1", "tc-fake", "ran from sbin:")
    proc = run(["tc-fake", "qdisc", "show"])
    assert proc.stdout == "ran from sbin: qdisc show\n"
    assert proc.args == ["tc-fake", "qdisc", "show"]  # argv (and so any ToolError's) is kept as given


def test_stream_executes_a_program_found_only_in_an_sbin_folder(user_path: Path) -> None:
    fake_program(user_path.parent / "sbin2", "nft-fake", "streamed from sbin:")
    with stream(["nft-fake", "list", "ruleset"]) as out:
        assert b"".join(out.blocks()) == b"streamed from sbin: list ruleset\n"
    assert out.returncode == 0


def test_run_prefers_the_program_on_the_childs_path(user_path: Path, tmp_path: Path) -> None:
    fake_program(user_path.parent / "sbin1", "tc-fake", "sbin")
    fake_program(user_path, "tc-fake", "path:")
    assert run(["tc-fake", "x"]).stdout == "path: x\n"
    child_path = fake_program(tmp_path / "child-bin", "tc-fake", "child path:").parent
    assert run(["tc-fake", "y"], env={"PATH": str(child_path)}).stdout == "child path: y\n"


def test_a_program_in_no_folder_is_still_a_clear_error(user_path: Path) -> None:
    with pytest.raises(TestbedError, match="program not found: no-such-program-here"):
        run(["no-such-program-here"])
    with pytest.raises(TestbedError, match="program not found: no-such-program-here"), \
            stream(["no-such-program-here"]):
        pass
