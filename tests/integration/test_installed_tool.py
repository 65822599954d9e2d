"""The testbed as a tool you install (issue 44): its wheel, installed into a fresh venv in a folder outside any
checkout (dependencies from the tests' wheelhouse, no index), works there for the unprivileged docker-group user:
`testbed doctor` is green, `testbed images build` reuses the checkout's images (an image's identity does not depend on
where its files lie), and a 2-cell sweep writes its bundle under the current folder. Nothing is written inside the
venv. The wheel's contents without Docker: tests/unit/test_wheel_contents.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator import __version__

from .docker_user import DockerUser, wheelhouse

REPO = Path(__file__).resolve().parents[2]
PLAN = ("--scenarios", "plain,tls", "--payloads", "65", "--samples", "5", "--interval", "20ms")


@dataclass(frozen=True)
class Installed:
    user: DockerUser
    venv: Path
    work: Path  # the user's current folder for every command
    install_s: float

    def run(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        # Python's bytecode cache (not compiled at install: --no-compile saves half the install's time) goes to a
        # folder of its own: what the venv gains is then only what the tool writes
        return self.user.run(argv, timeout=timeout, cwd=self.work,
                             env={"PYTHONPYCACHEPREFIX": str(self.work.parent / "pycache")})

    def testbed(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv / "bin" / "testbed"), *args, timeout=timeout)


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def installed(docker_user: DockerUser) -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="testbed-installed-", dir="/tmp"))  # outside any checkout
    try:
        dist = root / "dist"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(dist), str(REPO)], check=True, capture_output=True, timeout=300)
        (wheel,) = dist.glob("mqtt_tls_testbed-*.whl")
        print(f"wheel {wheel.name}: {wheel.stat().st_size} bytes")
        subprocess.run(["chown", "-R", f"{docker_user.uid}:{docker_user.gid}", str(root)], check=True)
        wh, _req = wheelhouse()
        venv, work = root / "venv", docker_user.mkdir(root / "work")
        started = time.monotonic()
        for step in (["/usr/bin/python3", "-m", "venv", str(venv)],
                     [str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "--no-index", "--find-links", str(wh),
                      "--find-links", str(dist), "mqtt-tls-testbed"]):
            proc = docker_user.run(step, timeout=900, cwd=root)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        found = Installed(docker_user, venv, work, time.monotonic() - started)
        print(f"installed in {found.install_s:.1f} s")
        yield found
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_installed_outside_a_checkout_it_checks_reuses_the_images_and_sweeps_here(installed: Installed) -> None:
    before = listing(installed.venv)
    python = str(installed.venv / "bin" / "python")
    where = installed.run(python, "-c", "import orchestrator; print(orchestrator.__file__)").stdout.strip()
    assert where == str(next(installed.venv.glob("lib/python3*/site-packages/orchestrator/__init__.py")))
    assert installed.testbed("--version").stdout.strip() == f"testbed {__version__}"  # no checkout: no commit

    doctor = installed.testbed("doctor", timeout=300)
    assert doctor.returncode == 0, doctor.stdout[-4000:] + doctor.stderr[-2000:]

    images = installed.testbed("images", "build", timeout=300)
    assert images.returncode == 0, images.stdout[-3000:] + images.stderr[-3000:]
    said = dict(line.rsplit(": ", 1) for line in images.stdout.splitlines() if line.startswith("testbed-"))
    assert said and set(said.values()) == {"reused"} and "testbed-labhost:latest" not in said, images.stdout

    sweep = installed.testbed("sweep", *PLAN, timeout=900)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    # the default --out, under the current folder (beside doctor's smoke capture, results/runs)
    (bundle,) = [p for p in (installed.work / "results").iterdir() if (p / "manifest.json").is_file()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert len(manifest["cells"]) == 2 and all(c["status"] == "ok" for c in manifest["cells"].values())
    assert (bundle / "report.html").is_file() and f"/{bundle.name}/report.html" in "".join(sweep.stdout.split())
    assert os.listdir(installed.work) == ["results"]
    assert listing(installed.venv) == before  # nothing written inside the venv (the package included)
