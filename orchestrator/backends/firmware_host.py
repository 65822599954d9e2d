"""The firmware's host build (CMake + g++ + libmbedtls-dev): board-emu, the emulated board.

Built once into the user's cache (``$XDG_CACHE_HOME/testbed/fw-host``, else ``~/.cache/testbed/fw-host``);
cmake rebuilds only what changed.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator import paths
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError

PACKAGES = "apt-get install -y g++ cmake make libmbedtls-dev"
GENERATED = ("Makefile", "build.ninja")  # what a finished configure step leaves for the build step


def host_source() -> Path:
    """firmware/platformio/host of the tree (the checkout's, or the installed package's: cmake builds out of it)."""
    return paths.tree() / "firmware" / "platformio" / "host"


def firmware_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "testbed" / "fw-host"


def build_target(target: str, build_dir: Path | None = None) -> Path:
    """Configure (once) and build one target of firmware/platformio/host; the binary's path."""
    missing = [t for t in ("cmake", "c++") if which(t) is None]
    if missing:
        raise TestbedError(f"building {target} needs {', '.join(missing)}", hint=PACKAGES)
    source = host_source()
    if not (source / "CMakeLists.txt").is_file():
        raise TestbedError(f"firmware host sources not found at {source}",
                           hint="run the testbed from its checkout, or reinstall the package")
    out = build_dir or firmware_cache_dir()
    configured = (out / "CMakeCache.txt").is_file() and any((out / f).is_file() for f in GENERATED)
    if not configured:
        proc = run(["cmake", "-S", str(source), "-B", str(out)], check=False, timeout=300)
        if proc.returncode:
            # a failed configure leaves a cache but no build files: drop it, so the retry after the fix
            # (e.g. libmbedtls-dev installed) configures again instead of running make on nothing
            (out / "CMakeCache.txt").unlink(missing_ok=True)
            raise TestbedError(f"cmake could not configure the firmware host build in {out}",
                               evidence=(proc.stdout + proc.stderr)[-2000:], hint=PACKAGES)
    proc = run(["cmake", "--build", str(out), "--target", target, "-j2"], check=False, timeout=900)
    if proc.returncode:
        raise TestbedError(f"building {target} failed", evidence=(proc.stdout + proc.stderr)[-3000:])
    return out / target
