"""Two docker-group users' sweeps at the same time (issue 23 part 3). Each invocation has its own compose project
(testbed-<user>-<id>: its containers, networks, helpers and a free host port), so both sweeps run side by side and
complete with the deterministic fields (counts, bytes, suites) of a solo run. Each user's `testbed down` while both
run leaves the other user's sweep alone, and names the user's own live sweep instead of removing it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from . import docker_user as docker_user_module
from .conftest import TWO_CELL_PLAN, Poller, only_bundle, owned, rows, this_lanes
from .docker_user import DockerUser

PLAN = TWO_CELL_PLAN  # the solo run is the session's two_cell_sweep (tests/integration/conftest.py)
SECOND = "testbed-user2"
# what does not depend on timing: how many messages went and came, their sizes layer by layer, the suite
FIELDS = {"loss": ("sent", "received_unique", "duplicates", "unexpected"),
          "capture": ("publish_publisher_to_broker", "publish_broker_to_subscriber"),
          "overhead_bytes": ("n_publish", "mqtt_len", "tls_record_len", "tls_overhead", "frame_len", "per_layer"),
          "throughput": ("payload_bytes",), "tls": ("version", "cipher_suite")}


class BrokerWatch(Poller):
    """Which projects' brokers run at the same moment (project label -> owner label), sampled every 0.2 s; only this
    lane's (this_lanes): the second docker lane's user sweeps beside this test in CI."""

    def __init__(self) -> None:
        super().__init__()
        self.together: list[dict[str, str]] = []
        self.both = threading.Event()

    def poll(self) -> None:
        fmt = '{{.Label "com.docker.compose.project"}} {{.Label "io.testbed.owner"}}'
        ps = subprocess.run(["docker", "ps", "--filter", "label=io.testbed.owned=true", "--filter",
                             "label=com.docker.compose.service=broker", "--format", fmt],
                            capture_output=True, text=True, check=False)
        running = {project: owner for project, owner in rows(ps.stdout) if owner and this_lanes(owner)}
        if len(running) >= 2:
            self.together.append(running)
            self.both.set()


def _fields(bundle: Path) -> dict[str, dict[str, object]]:
    """Every cell's deterministic fields, after checking that the sweep says every cell is ok."""
    cells = json.loads((bundle / "manifest.json").read_text())["cells"]
    assert len(cells) == 2 and all(c["status"] == "ok" for c in cells.values()), cells
    found = {}
    for cell in cells:
        metrics = json.loads((bundle / "runs" / cell / "metrics.json").read_text())
        found[cell] = {f"{part}.{key}": metrics[part][key] for part, keys in FIELDS.items() for key in keys}
    return found


def _lock_files(user: DockerUser) -> list[str]:
    folder = user.home / ".cache" / "testbed" / "projects"
    return sorted(p.name for p in folder.glob("*.lock")) if folder.is_dir() else []


@pytest.fixture(scope="module")
def second_user(docker_user: DockerUser) -> DockerUser:
    """A second user whose first sweep starts as warm as the first user's: the first user ran the solo sweep
    (two_cell_sweep), so its Python files are compiled and matplotlib's font cache is built; a fresh user's first
    `testbed sweep` spent ~13 s on them in a CI rehearsal (stop 37), and its sweep began after the other's ~15-s sweep
    had ended."""
    user = docker_user_module.create(SECOND)
    warm = user.run([str(user.clone / ".venv" / "bin" / "python"), "-c", "import orchestrator.cli.main, "
                     "orchestrator.measure.sweep, orchestrator.report.build, matplotlib.pyplot"], timeout=300)
    assert warm.returncode == 0, warm.stderr[-2000:]
    return user


def test_two_users_sweeps_run_side_by_side_as_solo(docker_user: DockerUser, second_user: DockerUser,
                                                   two_cell_sweep: Path) -> None:
    users = (docker_user, second_user)
    for user in users:
        user.testbed("down")
    expected = _fields(two_cell_sweep)  # the solo run: the same plan, by the first user alone
    assert {c["loss.sent"] for c in expected.values()} == {20}
    assert expected["tls-65B-none-r1"]["tls.cipher_suite"] and expected["plain-65B-none-r1"]["tls.version"] is None

    outs = {u.name: u.mkdir(u.work / "concurrent") for u in users}
    with BrokerWatch() as watch:
        procs = {u.name: u.popen("sweep", *PLAN, "--out", str(outs[u.name])) for u in users}
        assert watch.both.wait(timeout=180), "the two sweeps never had a broker up at the same time"
        # each user's `down` while both sweeps run: the other's sweep is not theirs, their own is live
        downs = {u.name: u.testbed("down", timeout=120) for u in users}
        ended = {name: p.communicate(timeout=600) for name, p in procs.items()}

    for user in users:
        stdout, stderr = ended[user.name]
        assert procs[user.name].returncode == 0, stdout[-2000:] + stderr[-2000:]
        assert _fields(only_bundle(outs[user.name])) == expected, user.name
        down = downs[user.name]
        assert down.returncode == 0, down.stderr
        assert f"left running: project testbed-{user.name}-" in down.stdout, down.stdout
        other = ({u.name for u in users} - {user.name}).pop()
        assert f"testbed-{other}-" not in down.stdout, down.stdout
        assert _lock_files(user) == []  # released when the sweep ended
    owners = [set(moment.values()) for moment in watch.together]
    assert {docker_user.name, second_user.name} in owners, watch.together[:5]
    assert owned("container") == [] and owned("network") == []


def _projects_of(owner: str) -> set[str]:
    ps = subprocess.run(["docker", "ps", "-a", "--filter", f"label=io.testbed.owner={owner}", "--format",
                         '{{.Label "com.docker.compose.project"}}'], capture_output=True, text=True, check=True)
    return set(ps.stdout.split())


def test_a_crashed_runs_leftovers_go_with_its_own_users_down(docker_user: DockerUser,
                                                             second_user: DockerUser) -> None:
    """SIGKILL leaves a run's containers behind with its lock free: the other user's `down` does not touch them, the
    owner's removes them and says whose they were."""
    out = docker_user.mkdir(docker_user.work / "crashed")
    proc = docker_user.popen("run", "--scenario", "plain", "--samples", "400", "--interval", "50ms",
                             "--out", str(out / "run"))
    deadline = time.monotonic() + 120
    while not (out / "run" / "logs" / "subscriber.csv").exists() and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.1)
    left = _projects_of(docker_user.name)
    proc.kill()  # setpriv execs the CLI: this is the testbed process itself, killed with no chance to clean up
    stdout, stderr = proc.communicate(timeout=30)
    assert len(left) == 1, (left, stdout[-2000:], stderr[-2000:])
    assert _projects_of(docker_user.name) == left  # its containers outlive it
    other = second_user.testbed("down", timeout=120)
    assert other.returncode == 0 and _projects_of(docker_user.name) == left, other.stdout + other.stderr
    own = docker_user.testbed("down", timeout=120)
    assert own.returncode == 0, own.stderr
    assert f"removed the leftover containers of ended invocation {left.pop()}: " in own.stdout, own.stdout
    assert _projects_of(docker_user.name) == set() and owned("container") == [] and owned("network") == []
    assert _lock_files(docker_user) == []


def test_a_second_users_up_on_a_taken_port_is_refused_by_name(docker_user: DockerUser,
                                                              second_user: DockerUser) -> None:
    """`up` keeps the port clients are told: taken by another user's session, it is refused naming that session,
    and neither user's `down` removes the other's."""
    first = docker_user.testbed("up", "--scenario", "plain", "--host-port", "18884", timeout=180)
    try:
        assert first.returncode == 0, first.stderr
        second = second_user.testbed("up", "--scenario", "plain", "--host-port", "18884", timeout=180)
        assert second.returncode != 0, second.stdout + second.stderr
        assert (f"port 18884 on 127.0.0.1 is published by testbed project testbed-{docker_user.name}-session of user "
                f"{docker_user.name}") in second.stderr, second.stderr
        assert second_user.testbed("down", timeout=120).returncode == 0
        assert _projects_of(docker_user.name) == {f"testbed-{docker_user.name}-session"}
    finally:
        docker_user.testbed("down", timeout=120)
    assert owned("container") == [] and owned("network") == []
