"""The fault suite (issue 23 part 6): one fault in the middle of a sweep's second cell per case, then four checks.

Each case runs a tiny 2-cell sweep as our users run it (the unprivileged docker-group user, from its own clone;
tests/integration/docker_user.py) and injects its fault as root once the first cell finished and the second is
busy. Then: the second cell fails (or is interrupted) naming the fault, in its record and in what the user saw (its
`failed CELL: ERROR` line): the first component the error names (tests/faults/conftest.py first_component) is the
one the fault hit, and the error says what became of it; the first cell's files and manifest entry are
byte-identical (checksums before and after, and after the resume); nothing of ours is left (containers, helpers,
networks, volumes, nft tables, qdiscs, NFQUEUE rules, the user's processes, .tmp files; on the lab's hosts too; a
probe that cannot look fails the case); `testbed sweep --resume` completes, running exactly the missing cell. A case
may check more of its own once the CLI exited (lab-fleet-host-lost: the other hosts' shares were stopped before
their end, the lost host is named as not torn down; its leftovers must be gone after the resume's up).

The table of what each case saw is printed at the end of the session (tests/faults/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.docker_user import DockerUser
from tests.integration.labhosts import PUBLISHER

from . import injectors as inj
from .conftest import ROWS, checksums, first_component, ours_left
from .injectors import SAMPLES

PLAN = ("--scenarios", "plain", "--payloads", "65,100", "--samples", str(SAMPLES), "--interval", "10ms",
        "--order", "as-listed")
FLEET_PLAN = ("--scenarios", "plain", "--payloads", "65,100", "--devices", str(inj.FLEET_DEVICES), "--connect-rate",
              "100", "--samples", str(inj.FLEET_SAMPLES), "--interval", f"{inj.FLEET_INTERVAL_S}s", "--order",
              "as-listed")
KILLED = r"failed first \(exited with code 137\)"  # docker kill: SIGKILL
BUSY_WITHIN_S = 240.0
EXIT_WITHIN_S = 300.0
DEBUG = ["--debug"] if os.environ.get("TESTBED_FAULTS_DEBUG") else []  # the CLI's tracebacks in the case's log


@dataclass
class Fault:
    """A running case: the user, its results folder, the sweep, and what the case's steps keep."""

    user: DockerUser
    out: Path
    request: pytest.FixtureRequest
    proc: subprocess.Popen[str] | None = None
    spared: list[int] = field(default_factory=list)  # the user's processes the case started (a board emulator)
    kept: dict[str, Any] = field(default_factory=dict)
    injected_at: float = 0.0

    @property
    def bundle(self) -> Path | None:
        found = [p for p in self.out.glob("*") if (p / "manifest.json").is_file()] if self.out.is_dir() else []
        return found[0] if len(found) == 1 else None

    def manifest(self) -> dict[str, Any]:
        bundle = self.bundle
        try:
            return json.loads((bundle / "manifest.json").read_text()) if bundle else {}
        except (OSError, ValueError):
            return {}  # being replaced

    def cells(self) -> list[str]:
        return self.manifest().get("cell_order", [])

    def run_dir(self, n: int) -> Path:
        assert self.bundle is not None
        return self.bundle / "runs" / self.cells()[n]

    def first_finished(self) -> bool:
        m = self.manifest()
        return bool(m.get("cell_order")) and m["cell_order"][0] in m.get("cells", {})


def subscriber_busy(f: Fault) -> bool:
    log = f.run_dir(1) / "logs" / "subscriber.csv"
    return log.exists() and log.read_text().count("\n") > 5


def nothing(_f: Fault) -> None:
    return None


def no_args(_f: Fault) -> list[str]:
    return []


@dataclass(frozen=True)
class Case:
    id: str
    fault: str
    how: str
    inject: Callable[[Fault], None]
    component: str | None  # the one the fault hits: the first its error names (conftest.COMPONENTS); None: ok
    expect: str | None  # what became of it: a pattern the cell's error shows (in its record and its line)
    status: str = "failed"
    exit_code: int = 1
    plan: tuple[str, ...] = PLAN
    setup: Callable[[Fault], list[str]] = no_args  # the sweep's extra arguments; may start what the case needs
    busy: Callable[[Fault], bool] = subscriber_busy  # the second cell is in its middle: time for the fault
    repair: Callable[[Fault], None] = nothing  # before the resume (the fault's cause taken away)
    teardown: Callable[[Fault], None] = nothing  # always, at the end
    left_elsewhere: Callable[[Fault], list[str]] = lambda _f: []  # what of ours is left beyond this machine
    checks: Callable[[Fault], None] = nothing  # the case's own, once the CLI exited (before the suite's)
    clean_within_s: float = 5.0  # nothing left this long after the exit (above 5 s: after the fault, a signal's)
    recorded: bool = True  # the cell's record can take its end (not on a full disk: the user's output tells it)


CASES = [
    Case("broker-killed", "broker killed", "docker kill of the broker container", inj.kill("broker"), "broker",
         KILLED),
    Case("broker-oom", "broker out of memory", "docker update --memory 32m on the broker, then one 96 MB PUBLISH "
         "(Mosquitto buffers it whole)", inj.broker_oom, "broker", r"failed first \(was killed for lack of memory "
         r"\(OOMKilled", plan=PLAN[:-3] + ("60ms", "--order", "as-listed")),  # long enough for the limit and PUBLISH
    Case("capture-killed", "capture killed", "docker kill of the capture container", inj.kill("capture"), "capture",
         KILLED),
    Case("subscriber-killed", "subscriber killed", "docker kill of the subscriber container",
         inj.kill("subscriber"), "subscriber", KILLED),
    Case("delay-line-killed", "delay line killed", "kill -KILL of the delay line in the router's NET_ADMIN helper "
         "(wifi-good, --delay-mechanism queue)", inj.kill_delay_line, "delay line", r"is not running \(pid \d+\)",
         plan=("--scenarios", "plain", "--payloads", "65", "--impairments", "none,wifi-good", "--delay-mechanism",
               "queue", "--samples", str(SAMPLES), "--interval", "10ms", "--order", "as-listed")),
    Case("disk-full", "disk full", "a 230 MB tmpfs as --out, filled by root mid-cell", inj.fill_disk, "disk",
         r"^disk full: cannot write ", setup=inj.small_disk, repair=inj.free_disk, teardown=inj.unmount_disk,
         recorded=False),
    Case("sigterm", "SIGTERM", "kill -TERM of the CLI (second cell impaired: lossy-5pct's nft table)",
         inj.signals(signal.SIGTERM), "user", r"^interrupted by the user \(SIGTERM\)$", status="interrupted",
         exit_code=130, plan=("--scenarios", "plain", "--payloads", "65", "--impairments", "none,lossy-5pct",
                              "--samples", str(SAMPLES), "--interval", "10ms", "--order", "as-listed"),
         clean_within_s=20.0),
    Case("sigint-twice", "SIGINT twice", "kill -INT of the CLI, again 0.3 s later (during its cleanup)",
         inj.signals(signal.SIGINT, signal.SIGINT), "user", r"^interrupted by the user \(SIGINT\)$",
         status="interrupted", exit_code=130, clean_within_s=20.0),
    Case("dockerd-restarted", "dockerd restarted", "dockerd stopped (SIGTERM, as scripts/stop-dockerd.sh) and started "
         "again by scripts/ensure-docker.sh", inj.restart_dockerd, "engine", r"^the Docker engine stopped answering ",
         repair=inj.engine_back, teardown=inj.engine_back, clean_within_s=90.0),
    Case("lab-host-paused", "a lab host paused", "docker pause of the publisher's lab host mid-cell (no answer, not "
         "even a reset) until the SSH keepalives count it lost (6 s) + 2 s, then unpaused", inj.pause_lab_host,
         "host", rf"host {re.escape(PUBLISHER)} became unreachable", plan=PLAN[:-3] + ("50ms", "--order", "as-listed"),
         setup=inj.lab_sweep, busy=inj.lab_publishing, teardown=inj.unpause_lab_host,
         left_elsewhere=inj.left_on_lab_hosts, clean_within_s=30.0),
    Case("lab-fleet-host-lost", "a publisher host lost mid-fleet", f"docker pause of {PUBLISHER}2, one of three "
         f"publisher hosts sharing a {inj.FLEET_DEVICES}-device fleet, 2 s into its share until the CLI exited, then "
         "unpaused (its leftovers go with the resume's up)", inj.lose_fleet_host, "host",
         rf"host {re.escape(PUBLISHER)}2 became unreachable", plan=FLEET_PLAN, setup=inj.lab_sweep,
         busy=inj.lost_host_publishing, repair=inj.lost_host_back, teardown=inj.unpause_lab_host,
         left_elsewhere=inj.left_on_fleet_hosts, checks=inj.lost_host_failed_alone),
    Case("board-unplugged", "the board unplugged", "board-emu exits half-way through the second cell (its serial "
         "port gone, as a board's USB cable pulled)", inj.board_gone, "board",
         r"^the board on \S+ \(\d+ Bd\) went away", setup=inj.board_sweep, repair=inj.board_back,
         teardown=inj.board_off),
    Case("second-user", "a second user's sweep started at the same time", "root's sweep of the same plan started "
         "with the user's (its own compose project)", inj.second_user_done, None, None, status="ok", exit_code=0,
         setup=inj.second_user_sweep, teardown=inj.second_user_off),
]


def _wait(predicate: Callable[[], bool], timeout_s: float, proc: subprocess.Popen[str]) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if predicate():
                return True
        except (OSError, ValueError, AssertionError, IndexError):
            pass  # a file being replaced, a folder not there yet
        time.sleep(0.05)
    return False


def _until_clean(f: Fault, case: Case, before: set[str], since: float) -> tuple[list[str], float]:
    """What is still left once it settled (within the case's bound after ``since``), and when it was clean."""
    deadline = since + case.clean_within_s
    while True:
        left = ours_left(f.user.uid, f.out, before=before, spared=f.spared) + case.left_elsewhere(f)
        if not left or time.monotonic() > deadline:
            return left, time.monotonic() - since
        time.sleep(0.25)


def _saw(said: str, cell: str) -> str:
    """The line of the user's output that tells what became of the cell (its status line, else the last line)."""
    lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
    told = [ln for ln in lines if re.match(rf"(ok|failed|interrupted) {re.escape(cell)}\b", ln)]
    return (told or lines[-1:] or ["(nothing)"])[-1][:240]


def check_error(case: Case, error: str, where: str) -> None:
    """The cell's error (from its record or its line) names the component the fault hit before any other, and says
    what became of it."""
    assert case.component is not None and case.expect is not None
    named = first_component(error)
    assert named == case.component, f"{where} names {named!r} first, not {case.component!r}: {error!r}"
    assert re.search(case.expect, error), f"{where} does not say {case.expect!r}: {error!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_fault_mid_cell(case: Case, docker_user: DockerUser, request: pytest.FixtureRequest) -> None:
    out = docker_user.work / "faults" / case.id
    subprocess.run(["rm", "-rf", str(out)], check=False)
    f = Fault(docker_user, docker_user.mkdir(out), request)
    row = {"fault": case.fault, "how injected": case.how, "what the user saw": "-", "what was left": "-",
           "resume": "-"}
    started = time.monotonic()
    try:
        extra = case.setup(f)
        before = set(ours_left(docker_user.uid, out, before=set(), spared=f.spared))
        log = out.parent / f"{case.id}.log"
        with log.open("w") as handle:
            f.proc = subprocess.Popen(docker_user.argv([docker_user.testbed_exe, *DEBUG, "sweep", *case.plan, *extra,
                                                        "--out", str(out), "--name", case.id]),
                                      stdout=handle, stderr=subprocess.STDOUT, text=True, env=docker_user.env(),
                                      cwd=docker_user.clone)
        busy = _wait(lambda: f.first_finished() and case.busy(f), BUSY_WITHIN_S, f.proc)
        assert busy, f"the second cell never got busy: {log.read_text()[-3000:]}"
        first = f.run_dir(0)
        sums = checksums(first, first.parent.parent / "manifest.json")
        f.injected_at = time.monotonic()
        case.inject(f)
        f.proc.wait(timeout=EXIT_WITHIN_S)
        exited = time.monotonic()
        said = log.read_text()
        second = f.cells()[1]
        record = json.loads((f.run_dir(1) / "cell.json").read_text())
        told = _saw(said, second)
        row["what the user saw"] = f"exit {f.proc.returncode}: {told}"
        left, took = _until_clean(f, case, before,
                                  f.injected_at if case.clean_within_s > 5 else exited)
        row["what was left"] = "; ".join(left) if left else f"nothing ({took:.1f} s after the " + \
            ("fault)" if case.clean_within_s > 5 else "exit)")
        assert f.proc.returncode == case.exit_code, said[-3000:]
        case.checks(f)
        assert "Traceback" not in said and "internal error" not in said, said[-3000:]
        assert told.startswith(f"{case.status} {second}"), said[-3000:]  # the user is told the cell, by name
        if case.component is not None:
            line = f"{case.status} {second}: "
            assert told.startswith(line), said[-3000:]
            check_error(case, told.removeprefix(line), "the user's line")
        if case.recorded:
            assert record["status"] == case.status, record
            if case.component is not None:
                check_error(case, record["error"] or "", "cell.json's error")
        else:
            assert record["status"] != "ok", record
        if case.status == "interrupted":
            assert f"testbed sweep --resume {f.bundle}" in said, said[-3000:]
        assert checksums(first, f.bundle / "manifest.json") == sums, "the finished cell changed"
        assert left == [], left

        case.repair(f)
        t = time.monotonic()
        resumed = docker_user.testbed("sweep", "--resume", str(f.bundle), timeout=EXIT_WITHIN_S)
        todo = 0 if case.status == "ok" else 1
        cells = f.manifest()["cells"]
        left_after, _took = _until_clean(f, case, before, time.monotonic())
        row["resume"] = (f"exit {resumed.returncode} in {time.monotonic() - t:.0f} s, "
                         f"{todo} cell(s) run, cells {sorted({c['status'] for c in cells.values()})}, first cell "
                         f"{'unchanged' if checksums(first, f.bundle / 'manifest.json') == sums else 'CHANGED'}"
                         + (f"; left: {left_after}" if left_after else ""))
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert f"{todo} cell(s) to run" in resumed.stderr, resumed.stderr[-3000:]
        assert {c["status"] for c in cells.values()} == {"ok"} and len(cells) == 2, cells
        assert checksums(first, f.bundle / "manifest.json") == sums, "the resume changed the finished cell"
        assert left_after == [], left_after
    finally:
        if f.proc is not None and f.proc.poll() is None:
            f.proc.kill()
            f.proc.wait(timeout=30)
        case.teardown(f)
        ROWS.append(row)
        print(f"{case.id}: {time.monotonic() - started:.1f} s; {row}", file=sys.stderr)
