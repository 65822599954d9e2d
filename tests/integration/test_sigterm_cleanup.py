"""SIGTERM (what `kill`, `docker stop`, systemd or a CI timeout send) means Ctrl-C for every command (issue 23, part 2's
acceptance): `run`, `up`, `impair apply`, a board run and a sweep, each stopped by SIGTERM mid-way as the docker-group
user runs them, exit 130 and within 20 s leave no io.testbed.owned container or network, and no nft table or qdisc
of ours: on this host, and for `impair apply --inventory` on the lab's router host (tests/integration/labhosts.py).

Each case is short: the signal comes as soon as the command is in the middle of its work (the publisher publishing,
the first container created, the board publishing, the router's table present).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.backends.impairment.argv import NETEM_HANDLE, NFT_TABLE, ROOT_HANDLE, TBF_HANDLE

from .board_emu import emulate
from .conftest import owned, rows, run_testbed, this_lanes
from .docker_user import DockerUser
from .labhosts import Lab, open_lab, require_image
from .test_lab_run import _user_copy, ours_on_hosts

CLEAN_WITHIN_S = 20.0
LOSS = "lossy-5pct"


def impairment_here() -> list[str]:
    """Our nft table and qdiscs on this host."""
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False).stdout
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True, check=False).stdout
    return ([t for t in tables.splitlines() if NFT_TABLE in t]
            + [q for q in qdiscs.splitlines() if any(f" {h}" in q for h in (ROOT_HANDLE, NETEM_HANDLE, TBF_HANDLE))])


def ours_here() -> list[str]:
    """Containers and networks with our label, and our nft table and qdiscs on this host."""
    return [f"container {c}" for c in owned("container")] + [f"network {n}" for n in owned("network")] \
        + impairment_here()


def running(service: str) -> bool:
    """A container of ``service`` runs, of this lane (not the second lane's user's: tests/conftest.py SECOND_LANE)."""
    proc = subprocess.run(["docker", "ps", "--filter", "label=io.testbed.owned=true", "--filter",
                           f"label=com.docker.compose.service={service}", "--filter", "status=running", "--format",
                           '{{.ID}} {{.Label "io.testbed.owner"}}'], capture_output=True, text=True, check=False)
    return any(this_lanes(owner) for _id, owner in rows(proc.stdout))


@dataclass
class Case:
    argv: list[str]
    busy: Callable[[], bool]  # the command is in the middle of its work: time for the signal
    left: Callable[[], list[str]]  # what of ours is still there


@pytest.fixture(scope="module")
def router_lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
               docker_user: DockerUser) -> Iterator[tuple[Lab, Path]]:
    """The lab's hosts and the user's copy of their inventory (only the impair case asks for it)."""
    require_image(request.config)
    with open_lab(tmp_path_factory.mktemp("sigterm-lab")) as lab:
        yield lab, _user_copy(lab, docker_user)


def _case(name: str, user: DockerUser, request: pytest.FixtureRequest) -> Case:
    out = user.work / f"sigterm-{name}"
    shutil.rmtree(out, ignore_errors=True)
    user.mkdir(out)
    long = ["--samples", "3000", "--interval", "20ms"]
    if name in ("run", "sweep"):
        argv = (["run", "--scenario", "tls", "--out", str(out / "run")] if name == "run"
                else ["sweep", "--scenarios", "plain", "--payloads", "65", "--out", str(out)])
        return Case([*argv, *long, "--impairments" if name == "sweep" else "--impairment", LOSS],
                    lambda: running("publisher"), ours_here)
    if name == "up":  # `up` runs no publisher: a profile on the broker->subscriber link
        profile = out / "sub-lossy.yaml"
        profile.write_text("description: 5 % loss towards the subscriber\nloss_pct: 5\ndirection: broker->subscriber\n")
        return Case(["up", "--scenario", "tls", "--impairment", str(profile)], lambda: bool(owned("container")),
                    ours_here)
    if name == "board-run":
        _emu, pty = request.getfixturevalue("board")
        serial = out / "run" / "logs" / "serial.log"
        return Case(["run", "--scenario", "plain", *long, "--publisher", "esp32", "--serial-port", str(pty),
                     "--impairment", LOSS, "--out", str(out / "run")],
                    lambda: serial.exists() and "MSG seq=20 " in serial.read_text(), ours_here)
    lab, inventory = request.getfixturevalue("router_lab")
    return Case(["impair", "apply", LOSS, "--inventory", str(inventory)],
                lambda: NFT_TABLE in lab.ssh("router", "nft", "list", "tables", timeout=20).stdout,
                lambda: ours_on_hosts(lab, ("router",)) + impairment_here())  # the lab's hosts are containers too


@pytest.fixture(scope="module")
def board(docker_user: DockerUser) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    emu, pty = emulate(docker_user, "sigterm")
    try:
        yield emu, pty
    finally:
        emu.terminate()
        emu.wait(timeout=30)


def _until(predicate: Callable[[], bool], timeout_s: float, proc: subprocess.Popen[str] | None = None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("name", ["run", "up", "impair-apply", "board-run", "sweep"])
def test_sigterm_mid_command_exits_130_and_leaves_nothing_of_ours_within_20_s(
        name: str, docker_user: DockerUser, request: pytest.FixtureRequest) -> None:
    case = _case(name, docker_user, request)
    run_testbed("down")
    there = set(case.left())  # not ours to judge: the lab's host containers (labelled too), anything already there
    new = case.left
    case.left = lambda: [x for x in new() if x not in there]
    log_path = docker_user.work / f"sigterm-{name}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(docker_user.argv([docker_user.testbed_exe, *case.argv]), stdout=log,
                                stderr=subprocess.STDOUT, text=True, env=docker_user.env(), cwd=docker_user.clone)
    try:
        busy = _until(case.busy, 300, proc)
        assert busy and proc.poll() is None, f"{name} never got busy: {log_path.read_text()[-3000:]}"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        clean = _until(lambda: proc.poll() is not None and case.left() == [], CLEAN_WITHIN_S)
        took = time.monotonic() - sent
        proc.wait(timeout=120)
        left = case.left()
    finally:
        if proc.poll() is None:
            proc.kill()
        run_testbed("down")
    said = log_path.read_text()
    print(f"SIGTERM of {name}: exit {proc.returncode}, nothing of ours left {took:.1f} s after the signal")
    assert proc.returncode == 130, said[-3000:]
    assert "Traceback" not in said and "interrupted" in said, said[-3000:]
    assert clean and left == [], f"after {took:.1f} s: {left}\n{said[-3000:]}"
