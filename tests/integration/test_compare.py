"""`testbed compare` on real bundles, as our users run it (the docker-group user, from its own clone): a sweep
through the emulated board against a virtual sweep of the same plan. The cells match by configuration, none is
left in one bundle only, the publisher is named as what differs, and the TLS record's 21 B are the same on both
sides. Then the virtual bundle against its rerun by `testbed sweep --plan`: the same cells in the same order, every
configuration matched, and the rerun's report and the comparison name the bundle it reproduces."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from .board_emu import emulate
from .conftest import TWO_CELL_PLAN
from .docker_user import DockerUser

PLAN = TWO_CELL_PLAN  # the virtual bundle is the session's two_cell_sweep (tests/integration/conftest.py)
CONFIGS = {"plain 65 B none qos 0", "tls 65 B none qos 0"}


def _sweep(user: DockerUser, name: str, *extra: str) -> Path:
    out = user.mkdir(user.work / name)
    proc = user.testbed("sweep", *PLAN, *extra, "--out", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def virtual(two_cell_sweep: Path) -> Path:
    return two_cell_sweep


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "comparisons.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_board_sweep_against_a_virtual_sweep_of_the_same_plan(docker_user: DockerUser, virtual: Path) -> None:
    board_proc, pty = emulate(docker_user, "compare-board", "--seed", "5")
    try:
        board = _sweep(docker_user, "compare-board", "--publisher", "esp32", "--serial-port", str(pty))
    finally:
        board_proc.terminate()
        board_proc.wait(timeout=30)
    out = docker_user.mkdir(docker_user.work / "compare-out")
    proc = docker_user.testbed("compare", str(virtual), str(board), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _rows(out)
    assert {(r["config_a"], r["config_b"]) for r in rows} == {(c, c) for c in CONFIGS}
    record = next(r for r in rows if r["config_a"] == "tls 65 B none qos 0" and r["metric"] == "tls_overhead_bytes")
    assert (record["mean_a"], record["mean_b"], record["delta_mean"]) == ("21", "21", "0")
    report = (out / "report.md").read_text(encoding="utf-8")
    first = report.splitlines()[2]
    assert "Made differently: " in first and "publisher" in first, first
    assert "| plan.publisher | virtual | esp32 |" in report
    only = report.split("## Cells in one bundle only", 1)[1].split("\n## ", 1)[0]
    assert "None: every finished configuration is in both bundles." in only
    assert (out / "report.html").stat().st_size > 0


def test_a_bundle_against_its_plan_rerun(docker_user: DockerUser, virtual: Path) -> None:
    out = docker_user.mkdir(docker_user.work / "compare-rerun")
    proc = docker_user.testbed("sweep", "--plan", str(virtual / "manifest.json"), "--out", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"reproducing {virtual.name}" in proc.stderr and "2 cells in its recorded order, seed 1" in proc.stderr
    rerun = next(p for p in out.iterdir() if p.is_dir())
    old, new = (json.loads((b / "manifest.json").read_text()) for b in (virtual, rerun))
    assert new["plan"] == old["plan"] and new["cell_order"] == old["cell_order"] and new["seed"] == old["seed"]
    assert new["reproduces"]["name"] == virtual.name and new["reproduces"]["host_options"] == {}
    assert {c["status"] for c in new["cells"].values()} == {"ok"} and new["cells"].keys() == old["cells"].keys()
    assert f"| reproduces | {virtual.name} (created {old['created_utc']}" in (rerun / "report.md").read_text()
    cmp_out = docker_user.mkdir(docker_user.work / "compare-rerun-out")
    proc = docker_user.testbed("compare", str(virtual), str(rerun), "--out", str(cmp_out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _rows(cmp_out)
    assert {(r["config_a"], r["config_b"]) for r in rows} == {(c, c) for c in CONFIGS}
    record = next(r for r in rows if r["config_a"] == "tls 65 B none qos 0" and r["metric"] == "tls_overhead_bytes")
    assert (record["mean_a"], record["mean_b"], record["delta_mean"]) == ("21", "21", "0")
    report = (cmp_out / "report.md").read_text(encoding="utf-8")
    assert "B reproduces A: A's plan rerun by testbed sweep --plan" in report.splitlines()[2]
    only = report.split("## Cells in one bundle only", 1)[1].split("\n## ", 1)[0]
    assert "None: every finished configuration is in both bundles." in only
