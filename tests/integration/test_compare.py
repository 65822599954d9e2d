"""`testbed compare` on real bundles, as our users run it (the docker-group user, from its own clone): a sweep
through the emulated board against a virtual sweep of the same plan. The cells match by configuration, none is
left in one bundle only, the publisher is named as what differs, and the TLS record's 21 B are the same on both
sides."""

from __future__ import annotations

import csv
from pathlib import Path

from .board_emu import emulate
from .docker_user import DockerUser

PLAN = ("--payloads", "65", "--samples", "40", "--interval", "50ms")
CONFIGS = {"plain 65 B none qos 0", "tls 65 B none qos 0"}


def _sweep(user: DockerUser, name: str, *extra: str) -> Path:
    out = user.mkdir(user.work / name)
    proc = user.testbed("sweep", *PLAN, *extra, "--out", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


def test_a_board_sweep_against_a_virtual_sweep_of_the_same_plan(docker_user: DockerUser) -> None:
    docker_user.testbed("down")
    virtual = _sweep(docker_user, "compare-virtual")
    board_proc, pty = emulate(docker_user, "compare-board", "--seed", "5")
    try:
        board = _sweep(docker_user, "compare-board", "--publisher", "esp32", "--serial-port", str(pty))
    finally:
        board_proc.terminate()
        board_proc.wait(timeout=30)
    out = docker_user.mkdir(docker_user.work / "compare-out")
    proc = docker_user.testbed("compare", str(virtual), str(board), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with (out / "comparisons.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
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
