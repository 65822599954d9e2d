"""Issue 40 part 6 in CI, on one host, as the docker-group user: a fleet whose loader is starved is loader-limited.

The same small fleet cell (plain MQTT, 100 devices at 50/s, 12 readings at 250 ms: its loader took 0.195 s of CPU in
5.0 s here, 4 % of a core) runs twice, each as its own one-cell sweep: once as it is, once with its publisher
container's CPU quota cut to 2 % of a core (`docker update --cpus`, as root, the moment the container exists: before
its devices start). The starved cell is loader-limited in cell.json, metrics.json, summary.csv, the report's
headline and fleet section and `testbed compare`, late in both phases; the unstarved one kept its steady schedule
and is at most a tenth as late in its connect phase (whether it is loader-limited at all depends on the host:
below). Plain MQTT keeps the unstarved loader's
own work small (no ECDHE). The unstarved half needs a host whose containers get the CPU they ask for: on a 2-core
machine that other work keeps at a load average near 8, the containers (one cgroup weighing as one task) wait more
than 10 ms often enough that even the unstarved loader falls behind, and the rule says so (docs/measurement-
notes.md). Here at a load average of 6.5: unstarved, connect lag p99 9.1 ms (1.0 % over 10 ms), steady p99 6.6 ms
(0.45 %); starved, 79 % of the connections and 67.5 % of the steady sends over 10 ms; 102 s for both tests, the two
sweeps included. In four runs here it passed twice (loads near 6.5 and 2; 72 s at the quieter) and twice the
unstarved cell was loader-limited too, at loads near 8 and 4.5 (6.0 % and 3.0 % of its connections more than 10 ms
late): on this machine that half fails when the other work takes the cores.
"""

from __future__ import annotations

import csv
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .docker_user import DockerUser

DEVICES, SAMPLES, RATE, INTERVAL = 100, 12, 50, "250ms"
STARVED_CPUS = "0.02"
CELL = f"plain-65B-none-{DEVICES}dev-r1"


def _docker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=False)


class Starver(threading.Thread):
    """Cuts the CPU quota of the user's publisher container as soon as it runs (polled every 50 ms)."""

    def __init__(self, owner: str) -> None:
        super().__init__(daemon=True)
        self.owner, self.done, self.stop = owner, threading.Event(), threading.Event()
        self.result = ""

    def run(self) -> None:
        while not self.stop.is_set():
            names = _docker("ps", "--filter", "label=io.testbed.owned=true", "--filter",
                            f"label=io.testbed.owner={self.owner}", "--filter",
                            "label=com.docker.compose.service=publisher", "--format", "{{.Names}}").stdout.split()
            if names:
                proc = _docker("update", "--cpus", STARVED_CPUS, names[0])
                self.result = f"{names[0]}: exit {proc.returncode} {proc.stderr.strip()}"
                self.done.set()
                return
            time.sleep(0.05)


def _sweep(user: DockerUser, name: str) -> Path:
    out = user.mkdir(user.work / name)
    proc = user.testbed("sweep", "--scenarios", "plain", "--baseline", "plain", "--payloads", "65", "--devices",
                        str(DEVICES), "--connect-rate", str(RATE), "--samples", str(SAMPLES), "--interval", INTERVAL,
                        "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def bundles(docker_user: DockerUser) -> dict[str, Path]:
    docker_user.testbed("down")
    free = _sweep(docker_user, "loader-free")
    starver = Starver(docker_user.name)
    starver.start()
    try:
        starved = _sweep(docker_user, "loader-starved")
    finally:
        starver.stop.set()
        starver.join(timeout=5)
    assert starver.done.is_set() and " exit 0 " in starver.result + " ", starver.result
    return {"free": free, "starved": starved}


def _read(bundle: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], str]:
    run = bundle / "runs" / CELL
    cell, metrics = json.loads((run / "cell.json").read_text()), json.loads((run / "metrics.json").read_text())
    with (bundle / "summary.csv").open() as f:
        (row,) = [r for r in csv.DictReader(f) if r["cell_id"] == CELL]
    return cell, metrics, row, (bundle / "report.md").read_text()


def test_a_starved_loader_is_loader_limited_and_an_unstarved_one_is_not(bundles: dict[str, Path]) -> None:
    read = {name: _read(bundles[name]) for name in ("free", "starved")}
    for name, (_cell, metrics, _row, _report) in read.items():  # both cells' figures, before any assertion
        lag, loader = metrics["fleet"]["schedule_lag_us"], metrics["fleet"]["loader"]
        print(f"{name}: connect lag p50 {lag['connect']['p50']} us, p99 {lag['connect']['p99']} us, "
              f"{lag['connect']['share_late_10ms']:.1%} over 10 ms; steady p99 {lag['steady']['p99']} us, "
              f"{lag['steady']['share_late_10ms']:.1%} over 10 ms; loader CPU {loader['cpu_s']:.3f} s in "
              f"{loader['wall_s']} s; {lag['verdict']}")
    for name in ("free", "starved"):  # whatever the verdict, every place says the same
        cell, metrics, row, report = read[name]
        lag = metrics["fleet"]["schedule_lag_us"]
        expected = lag["loader_limited"]
        assert metrics["fleet"]["messages"]["sent"] == DEVICES * SAMPLES, metrics["fleet"]["messages"]
        assert cell["limited"]["loader"] is expected and metrics["fleet"]["limited"]["loader"] is expected
        assert lag["connect"]["n"] == DEVICES
        assert ("loader-limited" in row["limited"]) is expected, row["limited"]
        assert (f"{CELL} (loader-limited)" in report) is expected
        assert ("FELL BEHIND (loader-limited)" in report) is expected
    free = read["free"][1]["fleet"]["schedule_lag_us"]
    starved = read["starved"][1]["fleet"]["schedule_lag_us"]
    # starved: loader-limited, late in both phases by far
    assert starved["loader_limited"] is True and {x["phase"] for x in starved["late"]} == {"connect", "steady"}
    assert starved["connect"]["share_late_10ms"] > 0.5 and starved["steady"]["share_late_10ms"] > 0.5
    # unstarved: each phase at most a tenth as late as the starved one's. Not asserted: that the unstarved cell is
    # not loader-limited at all. On this 2-core host, beside the tests without Docker, 1-2 of its 100 devices began
    # their connection just over 10 ms late in some runs (CI rehearsal, stop 46: 2.0 %, p99 10.8 ms), and in another
    # rehearsal (stop 47) its steady phase had a p99 of 13 ms; the rule (more than 1 % over 10 ms) rightly calls
    # those late. That acceptance item of issue 40 stays open: it needs a machine the fleet has to itself.
    for phase in ("connect", "steady"):
        assert free[phase]["share_late_10ms"] <= starved[phase]["share_late_10ms"] / 10, (phase, free[phase])


def test_compare_flags_the_loader_limited_side(bundles: dict[str, Path], docker_user: DockerUser) -> None:
    out = docker_user.work / "loader-compare"
    proc = docker_user.testbed("compare", str(bundles["free"]), str(bundles["starved"]), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = (out / "report.md").read_text()
    free = json.loads((bundles["free"] / "runs" / CELL / "metrics.json").read_text())["fleet"]["limited"]["loader"]
    flags = "(A: loader-limited, B: loader-limited)" if free else "(B: loader-limited)"
    assert flags in report and ("A: loader-limited" in report) is free
    assert f"B: {CELL} (loader-limited)" in report
    with (out / "comparisons.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["limited_b"].startswith("loader-limited") for r in rows)
    assert all(("loader" in r["limited_a"]) is free for r in rows)
