"""Fixtures for tests that drive the real testbed containers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTBED = str(Path(sys.executable).parent / "testbed")


def run_testbed(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TESTBED, *args], capture_output=True, text=True, timeout=timeout, check=False)


def owned(kind: str) -> list[str]:
    ls = {"container": ["ps", "-aq"], "network": ["network", "ls", "-q"], "volume": ["volume", "ls", "-q"]}[kind]
    proc = subprocess.run(["docker", *ls, "--filter", "label=io.testbed.owned=true"], capture_output=True,
                          text=True, check=True)
    return proc.stdout.split()


@pytest.fixture
def clean_testbed() -> Iterator[None]:
    """Start from nothing and leave nothing behind, whatever the test did."""
    run_testbed("down")
    yield
    run_testbed("down")
