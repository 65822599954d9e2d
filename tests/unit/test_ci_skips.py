"""CI cannot go green by skipping. Under CI=true (`make test` in CI) a test whose tool `make test` installs fails
when the tool is missing, and any skip or xfail that tests/skips.py's ALLOWED does not list fails the run
(tests/conftest.py's hooks); a listed one passes, only where its fact holds. Each is seen in a real pytest run
in a subprocess: the project's own test files with the tools taken off PATH, and small generated test files."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import skips

REPO = Path(__file__).resolve().parents[2]

# {node id (a file: each of its tests): what its failure must name} with every tool below taken off PATH
NEEDS_A_TOOL = {
    "tests/unit/test_lab_credentials.py::test_our_hash_is_mosquittos_and_mosquitto_passwd_agrees": "mosquitto_passwd",
    "tests/unit/test_platformio.py::test_generated_header_compiles_to_the_same_bytes": "g++",
    "tests/unit/test_platformio.py::test_pio_project_config_accepts_platformio_ini": "PlatformIO",
    "tests/firmware/test_firmware_esp32_syntax.py": "g++",
    "tests/firmware/test_pio_envs.py": "PlatformIO",
    "tests/unit/analysis/test_clock.py::test_cpp_client_reports_a_missing_server": "g++",
    "tests/unit/test_firmware_host_build.py": "cmake",
    "tests/unit/report/test_report_layout.py::test_the_headline_comes_first": "chromium",
    "tests/unit/test_delayline_netns.py::test_refuses_bad_options_before_binding": "pkg-config",
    "tests/unit/test_impairment_netns.py::test_sigint_during_impairment_leaves_nothing_behind": "nft",
}
OFF_PATH = {"mosquitto_passwd", "g++", "pio", "platformio", "cmake", "chromium", "chromium-browser", "pkg-config",
            "nft"}


def _mirror(tmp: Path, drop: set[str]) -> tuple[Path, str]:
    """(a python, a PATH) that reach every program of this PATH and this venv but those in `drop`: symlinks, with
    the venv's pyvenv.cfg and lib, so that its python has the venv's packages and no dropped program beside it
    (PlatformIO is looked for next to the python too)."""
    venv = Path(sys.prefix)
    assert (venv / "pyvenv.cfg").is_file(), f"run from the project's venv (make venv), not {sys.executable}"
    fake_venv, fake_path = tmp / "venv", tmp / "path"
    (fake_venv / "bin").mkdir(parents=True)
    fake_path.mkdir()
    (fake_venv / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (fake_venv / "lib").symlink_to(venv / "lib")
    for target, folders in ((fake_venv / "bin", [venv / "bin"]),
                            (fake_path, [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p])):
        for folder in folders:
            for program in sorted(folder.iterdir()) if folder.is_dir() else []:
                if program.name not in drop and not (target / program.name).exists():
                    (target / program.name).symlink_to(program)
    return fake_venv / "bin" / Path(sys.executable).name, f"{fake_venv / 'bin'}{os.pathsep}{fake_path}"


def _pytest(python: Path | str | list[str], args: list[str], tmp: Path, *, ci: bool = True, path: str | None = None,
            cwd: Path = REPO, extra_env: dict[str, str] | None = None) -> tuple[int, dict[str, tuple[str, str]], str]:
    """(exit status, {node id: (outcome, message)}, output) of a pytest run in a subprocess (`python`: a program,
    or an argv that ends with one)."""
    report = tmp / f"report-{len(list(tmp.glob('report-*')))}.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(extra_env or {})
    env["CI"] = "true" if ci else "false"
    if path is not None:
        env["PATH"] = path
    argv = [str(x) for x in python] if isinstance(python, list) else [str(python)]
    proc = subprocess.run([*argv, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert report.is_file(), f"pytest wrote no report (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
    results = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        nodeid = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        child = next(iter(case), None)
        outcome = "passed" if child is None or child.tag in ("system-out", "system-err") else child.tag
        results[nodeid] = (outcome, "" if child is None else (child.get("message") or child.text or ""))
    return proc.returncode, results, proc.stdout + proc.stderr


def test_under_ci_a_test_whose_tool_is_off_path_fails_and_does_not_skip(tmp_path: Path) -> None:
    python, path = _mirror(tmp_path, OFF_PATH)
    status, results, output = _pytest(python, list(NEEDS_A_TOOL), tmp_path, path=path)
    assert status == 1, output[-3000:]
    for selected, tool in NEEDS_A_TOOL.items():
        ran = {nodeid: r for nodeid, r in results.items() if nodeid == selected or nodeid.startswith(selected + "::")
               or nodeid.startswith(selected + "[")}
        assert ran, f"{selected}: no test ran\n{output[-3000:]}"
        if "netns" in selected and os.geteuid() != 0:
            tool = "netns test needs root"  # the root gate comes first (tests/conftest.py)
        for nodeid, (outcome, message) in ran.items():
            assert outcome in ("failure", "error"), f"{nodeid}: {outcome} with {tool} off PATH: {message}"
            assert tool in message and "CI=true" in message, f"{nodeid}: {message}"
            assert "ALLOWED does not list" not in message, f"{nodeid} skipped, only the net caught it: {message}"


NETNS_TESTS = ["tests/unit/test_delayline_netns.py::test_refuses_bad_options_before_binding",
               "tests/unit/test_impairment_netns.py::test_clear_is_safe_twice_and_removes_only_ours"]


def test_without_root_a_netns_test_fails_under_ci_before_its_module_is_set_up() -> None:
    """The root gate (tests/conftest.py) is reached: no module-level skip comes first. Run as nobody when root, in a
    folder of its own (pytest's are private to root)."""
    as_user: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            skips.skip_or_fail("setpriv not installed (util-linux), to run pytest as nobody")
        as_user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    with tempfile.TemporaryDirectory(prefix="testbed-ci-skips-") as folder:
        tmp = Path(folder)
        tmp.chmod(0o777)
        for ci, tests, outcome, said in ((True, NETNS_TESTS, "error", "netns test needs root and CI runs as root"),
                                         (False, NETNS_TESTS[:1], "skipped", "needs root for network namespaces")):
            args = ["--basetemp", str(tmp / "base"), *tests]
            status, results, output = _pytest(as_user + [sys.executable], args, tmp, ci=ci)
            assert sorted(results) == sorted(tests), output
            assert all(r[0] == outcome and said in r[1] for r in results.values()), output
            assert status == (1 if ci else 0), output


SKIPPING = '''
import pytest

def test_passes():
    pass

def test_skips():
    pytest.skip("no reason to be here")

@pytest.mark.skipif(True, reason="a mark's reason")
def test_skip_mark():
    pass

def test_xfails():
    pytest.xfail("the host is too busy")
'''

# the netem pair's node ids (tests/skips.py ALLOWED), each skipping with its listed reason, and one case of the
# first with a reason the table does not list
NETEM_PAIR = '''
import pytest

@pytest.mark.parametrize("reason", ["kernel lacks sch_netem", "needs root for network namespaces"])
def test_netem_delay_is_applied_where_the_kernel_has_it(reason):
    pytest.skip(reason)

def test_delay_profile_without_netem_fails_before_anything_is_applied():
    pytest.skip("kernel has sch_netem")
'''

MODULE_SKIP = '''
import pytest

pytest.skip("a whole module, at collection", allow_module_level=True)

def test_never_runs():
    pass
'''


@dataclass(frozen=True)
class Run:
    status: int
    results: dict[str, tuple[str, str]]
    output: str


def _run_generated(root: Path, tmp: Path, *args: str, ci: bool = True) -> Run:
    return Run(*_pytest(sys.executable, ["-p", "tests.conftest", "--rootdir", str(root), *args], tmp, ci=ci,
                        cwd=root, extra_env={"PYTHONPATH": str(REPO)}))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run, Run]:
    """A tree of the generated test files under tests/ (its own root; tests/conftest.py comes in as a plugin), and
    its runs under CI=true and outside CI."""
    tmp = tmp_path_factory.mktemp("generated")
    root = tmp / "gen"
    (root / "tests" / "unit").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "tests" / "unit" / "test_skipping.py").write_text(SKIPPING)
    (root / "tests" / "unit" / "test_impairment_netns.py").write_text(NETEM_PAIR)
    (root / "tests" / "unit" / "test_module_skip.py").write_text(MODULE_SKIP)
    return root, _run_generated(root, tmp, "tests"), _run_generated(root, tmp, "tests", ci=False)


GENERATED = "tests/unit/"  # the generated files (only in the tree the fixture writes)
UNIT = GENERATED + "test_skipping.py::"
NETNS = "tests/unit/test_impairment_netns.py::"


def test_under_ci_an_unlisted_skip_or_xfail_fails_the_run_with_its_reason(generated: tuple[Path, Run, Run]) -> None:
    _root, ci, elsewhere = generated
    assert ci.status == 1, ci.output
    assert ci.results[UNIT + "test_passes"][0] == "passed"
    for name, reason, kind in (("test_skips", "no reason to be here", "skip"), ("test_skip_mark", "a mark's reason",
                               "skip"), ("test_xfails", "the host is too busy", "xfail")):
        outcome, message = ci.results[UNIT + name]
        assert outcome in ("failure", "error"), (name, outcome, ci.output)
        assert f"{kind} under CI=true that tests/skips.py's ALLOWED does not list: {reason}" in message, ci.output
    # outside CI they skip (and xfail), and the run is green
    assert elsewhere.status == 0, elsewhere.output
    assert [elsewhere.results[UNIT + n][0] for n in ("test_skips", "test_skip_mark", "test_xfails")] == [
        "skipped"] * 3, elsewhere.output


def test_under_ci_a_module_skipped_at_collection_fails_the_run(generated: tuple[Path, Run, Run]) -> None:
    _root, ci, elsewhere = generated
    assert "skipped at collection, which CI=true does not allow (the run fails)" in ci.output
    assert (f"{GENERATED}test_module_skip.py: skip under CI=true that tests/skips.py's ALLOWED does not list: "
            "a whole module, at collection") in ci.output
    assert "skipped at collection" not in elsewhere.output and elsewhere.status == 0


def test_under_ci_only_the_listed_netem_half_this_kernel_rules_out_may_skip(generated: tuple[Path, Run, Run],
                                                                            tmp_path: Path) -> None:
    root, ci, _elsewhere = generated
    applied = ci.results[NETNS + "test_netem_delay_is_applied_where_the_kernel_has_it[kernel lacks sch_netem]"]
    refused = ci.results[NETNS + "test_delay_profile_without_netem_fails_before_anything_is_applied"]
    has_netem = skips.kernel_has_netem()
    assert has_netem is not None, "tests/skips.py could not probe this kernel for sch_netem"
    allowed, disallowed = (refused, applied) if has_netem else (applied, refused)
    assert allowed[0] == "skipped", ci.output
    assert disallowed[0] == "failure" and "a listed reason that does not hold on this machine" in disallowed[1]
    wrong = ci.results[NETNS + "test_netem_delay_is_applied_where_the_kernel_has_it[needs root for network namespaces]"]
    assert wrong[0] == "failure" and "ALLOWED does not list: needs root for network namespaces" in wrong[1], ci.output
    # the allowed half alone: the run is green
    alone = NETNS + ("test_delay_profile_without_netem_fails_before_anything_is_applied" if has_netem else
                     "test_netem_delay_is_applied_where_the_kernel_has_it[kernel lacks sch_netem]")
    run = _run_generated(root, tmp_path, alone)
    reason = "kernel has sch_netem" if has_netem else "kernel lacks sch_netem"
    assert run.status == 0 and list(run.results.values()) == [("skipped", reason)], run.output


def test_every_allowed_entry_names_a_test_that_exists() -> None:
    for entry in skips.ALLOWED:
        file, _, name = entry.nodeid.partition("::")
        text = (REPO / file).read_text(encoding="utf-8")
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", text, re.M), entry.nodeid
        assert entry.why.strip() and entry.holds is not None, entry


def _make_test(tmp: Path, failing: str | None) -> tuple[int, list[str], str]:
    """`make test` with the Makefile's own recipe and stand-ins for the programs it calls, each noting its call;
    `failing` (ruff, mypy, python: the size rule) exits 1. The host-package step stands for everything after lint
    and stops the target there."""
    shutil.copy(REPO / "Makefile", tmp / "Makefile")
    for recipe in ("pyproject.toml", "setup.py"):  # what .venv/.installed is made from
        (tmp / recipe).write_text("")
    calls = tmp / "calls"
    for name, script in (("ruff", ".venv/bin/ruff"), ("mypy", ".venv/bin/mypy"), ("python", ".venv/bin/python"),
                         ("system", "scripts/ensure-system.sh")):
        stand_in = tmp / script
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stop = 1 if name in (failing, "system") else 0
        stand_in.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit {stop}\n')
        stand_in.chmod(0o755)
    (tmp / ".venv" / ".installed").touch()  # newer than both: the venv is up to date
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "test"], cwd=tmp, env=env, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, calls.read_text().splitlines() if calls.exists() else [], proc.stdout + proc.stderr


@pytest.mark.parametrize("failing", ["ruff", "mypy", "python"])
def test_make_test_runs_ruff_mypy_and_the_size_rule_first_and_stops_on_their_error(tmp_path: Path,
                                                                                   failing: str) -> None:
    status, calls, output = _make_test(tmp_path, failing)
    lint = ["ruff check orchestrator tests bench scripts", "mypy orchestrator scripts/size_lint.py",
            "python scripts/size_lint.py"]
    upto = [c.split()[0] for c in lint].index(failing) + 1
    assert status != 0 and calls == lint[:upto], (calls, output)
    assert "[Makefile" in output and "lint] Error 1" in output, output


def test_make_test_goes_on_after_a_clean_lint(tmp_path: Path) -> None:
    status, calls, output = _make_test(tmp_path, None)
    assert status != 0 and calls == ["ruff check orchestrator tests bench scripts",
                                     "mypy orchestrator scripts/size_lint.py", "python scripts/size_lint.py",
                                     "system test"], (calls, output)


def test_no_test_turns_a_failure_into_an_xfail() -> None:
    """An xfail is a failure said to be expected: none in tests/ (test_board_emu_path had one for late holds, which
    is what a late delay line gives). Under CI=true one would fail the run anyway (tests/conftest.py)."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "xfail" and path.name != "test_ci_skips.py":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_the_impairment_helper_test_runs_on_an_image_make_test_builds() -> None:
    """testbed-base:bookworm exists only where no registry answered (debootstrap): on a machine that pulled
    debian:bookworm-slim the test skipped. It runs on an image `testbed images build` makes, which the Docker gate
    (tests/conftest.py) requires."""
    from orchestrator.backends.images import IMAGES
    from tests.integration import test_impairment_docker

    assert test_impairment_docker.IMAGE in {spec.tag for spec in IMAGES}
    assert test_impairment_docker.IMAGE in ("testbed-broker:latest", "testbed-capture:latest",
                                            "testbed-subscriber:latest")
