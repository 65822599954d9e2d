"""Where the testbed finds its files and keeps its state (orchestrator/paths.py, issue 44): TESTBED_HOME names a
checkout and wins; a checkout keeps state and caches in its .testbed/ and .cache/; the installed package's side
(its orchestrator/_tree, the XDG folders) is tests/unit/test_wheel_contents.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import paths
from orchestrator.errors import TestbedError


def _tree(root: Path) -> Path:
    (root / "compose").mkdir(parents=True)
    (root / "compose" / "testbed.yml").write_text("services: {}\n")
    (root / "images").mkdir()
    return root


def test_testbed_home_names_the_checkout_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _tree(tmp_path / "clone")
    monkeypatch.setenv("TESTBED_HOME", str(home))
    assert paths.tree() == home and paths.compose_file() == home / "compose" / "testbed.yml"
    assert paths.state_dir() == home / ".testbed" and paths.cache_dir() == home / ".cache"
    assert paths.source("orchestrator/clients") == home / "orchestrator" / "clients"


def test_testbed_home_that_is_no_checkout_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBED_HOME", str(tmp_path))
    with pytest.raises(TestbedError, match="is not a testbed checkout"):
        paths.tree()


def test_this_checkout_keeps_its_state_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESTBED_HOME", raising=False)
    root = Path(paths.__file__).resolve().parents[1]
    assert paths.checkout() == root and paths.tree() == root and paths.state_dir() == root / ".testbed"


def test_outside_a_checkout_state_and_caches_follow_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESTBED_HOME", raising=False)
    monkeypatch.setattr(paths, "package_parent", lambda: tmp_path / "site-packages")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")  # the spec: only an absolute path counts
    assert paths.checkout() is None
    assert paths.state_dir() == tmp_path / ".local" / "state" / "testbed"
    assert paths.cache_dir() == tmp_path / ".cache" / "testbed"
