"""The host build is retried cleanly after its cause is fixed: a failed configure leaves nothing that makes the
next build skip configuring (was: "gmake: Makefile: No such file or directory" until the cache was removed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.backends import firmware_host
from orchestrator.errors import TestbedError
from tests.skips import skip_or_fail

PROJECT = """cmake_minimum_required(VERSION 3.13)
project(retry C)
if(NOT EXISTS ${CMAKE_SOURCE_DIR}/dependency_installed)
  message(FATAL_ERROR "dependency not found (stands in for libmbedtls-dev)")
endif()
add_executable(hello hello.c)
"""


def test_a_failed_configure_is_redone_after_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = [t for t in ("cmake", "cc") if shutil.which(t) is None]
    if missing:  # make test installs both; elsewhere say what is missing
        skip_or_fail(f"needs {', '.join(missing)}")
    source = tmp_path / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(PROJECT)
    (source / "hello.c").write_text("int main(void) { return 0; }\n")
    monkeypatch.setattr(firmware_host, "host_source", lambda: source)
    build = tmp_path / "build"

    with pytest.raises(TestbedError, match="could not configure") as failed:
        firmware_host.build_target("hello", build)
    assert "stands in for libmbedtls-dev" in (failed.value.evidence or "")
    assert not (build / "CMakeCache.txt").exists()

    (source / "dependency_installed").touch()  # the user installs what was missing, then retries
    binary = firmware_host.build_target("hello", build)
    assert binary == build / "hello" and binary.is_file()
