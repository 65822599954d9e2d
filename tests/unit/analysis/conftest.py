"""Fixtures of the analysis tests (helpers live in analysis_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_helpers import reference_dir


@pytest.fixture(scope="session")
def ref() -> Path:
    path = reference_dir()
    if not (path / "README.md").is_file():
        pytest.fail(f"reference captures not found at {path}: set TESTBED_REFERENCE_CAPTURES")
    return path
