"""How each fault of tests/faults/test_faults.py is made (as root), and what each case sets up and takes away."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import paho.mqtt.client as mqtt

from orchestrator.backends.remote_bounds import lost_after_s
from tests.integration.board_emu import emulate

if TYPE_CHECKING:
    from .test_faults import Fault

REPO = Path(__file__).resolve().parents[2]
TESTBED = str(Path(sys.executable).parent / "testbed")
DOCKERD_PID = Path("/run/testbed-dockerd.pid")  # scripts/ensure-docker.sh's
REMOTE = "/opt/testbed"
SAMPLES = 100  # per cell: 1 s of publishing at 10 ms


def docker(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, check=False)


def container_of(f: Fault, service: str) -> str:
    """The user's running container of compose service ``service``."""
    proc = docker("ps", "--filter", "label=io.testbed.owned=true", "--filter", f"label=io.testbed.owner={f.user.name}",
                  "--filter", f"label=com.docker.compose.service={service}", "--format", "{{.Names}}")
    names = proc.stdout.split()
    assert len(names) == 1, (service, proc.stdout, proc.stderr)
    return names[0]


# ---- containers


def kill(service: str) -> Callable[[Fault], None]:
    def inject(f: Fault) -> None:
        proc = docker("kill", container_of(f, service))
        assert proc.returncode == 0, proc.stderr
    return inject


def broker_oom(f: Fault) -> None:
    """A memory limit on the running broker, then one PUBLISH far larger than it: Mosquitto reads a packet whole into
    memory before it acts on it, so the broker process itself outgrows the limit and the kernel kills it."""
    name = container_of(f, "broker")
    proc = docker("update", "--memory", "32m", "--memory-swap", "32m", name)
    assert proc.returncode == 0, proc.stderr
    port = docker("port", name).stdout.split()[-1].rsplit(":", 1)[1]
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fault-oom")
    passwords = f.run_dir(1) / "pki" / "passwords.txt"  # none in a plain cell: the broker takes anyone on loopback
    if passwords.exists():
        client.username_pw_set("publisher", dict(ln.split(":", 1) for ln in passwords.read_text().splitlines())
                               ["publisher"])
    client.connect("127.0.0.1", int(port))
    client.loop_start()
    try:
        client.publish("fault/oom", b"\0" * (96 << 20))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() \
                == "true":
            time.sleep(0.1)
        state = docker("inspect", "-f", "{{.State.Running}} {{.State.OOMKilled}}", name).stdout.strip()
        assert state != "true false", f"the broker outlived the limit and the 96 MB PUBLISH for 20 s ({state})"
    finally:
        client.loop_stop()
        client.disconnect()


def kill_delay_line(f: Fault) -> None:
    """SIGKILL to the delay line in the router's NET_ADMIN helper (its pid from its stats file)."""
    helper = container_of(f, "router") + "-netadmin"
    proc = docker("exec", helper, "sh", "-c", "kill -KILL $(sed -n 's/.*\"pid\": *\\([0-9]*\\).*/\\1/p' "
                  "/dev/shm/testbed-delayline-7357.json)")
    assert proc.returncode == 0, proc.stderr


# ---- the engine


def _engine_answers() -> bool:
    return docker("version", "--format", "{{.Server.Version}}", timeout=20).returncode == 0


def _start_engine() -> None:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "ensure-docker.sh"), str(Path(sys.executable).parents[1])],
                          capture_output=True, text=True, timeout=180, check=False, cwd=REPO)
    assert proc.returncode == 0 and _engine_answers(), proc.stdout + proc.stderr


def restart_dockerd(f: Fault) -> None:
    """dockerd stopped as scripts/stop-dockerd.sh stops it (SIGTERM to the pid ensure-docker.sh recorded), waited
    for, and started again by scripts/ensure-docker.sh; under systemd, `systemctl restart docker`."""
    if DOCKERD_PID.exists():
        pid = int(DOCKERD_PID.read_text())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), "dockerd did not stop within 60 s"
        DOCKERD_PID.unlink()
        _start_engine()
    elif shutil.which("systemctl") and subprocess.run(["systemctl", "is-active", "-q", "docker"],
                                                      check=False).returncode == 0:
        subprocess.run(["systemctl", "restart", "docker"], check=True, timeout=180)
    else:
        raise AssertionError("dockerd was started neither by scripts/ensure-docker.sh nor by systemd: "
                             "the suite cannot restart it")


def engine_back(_f: Fault) -> None:
    """Whatever happened, the engine answers again (everything after needs it)."""
    if not _engine_answers():
        _start_engine()


# ---- the disk


def small_disk(f: Fault) -> list[str]:
    """A 230 MB tmpfs, the user's, as --out: room for the sweep's and each cell's checks (200 MB free at the start,
    the cell's expected size before it), then filled."""
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=230m,mode=0755,uid={f.user.uid},gid={f.user.gid}",
                           "fault-disk", str(f.out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    f.kept["mounted"] = True
    return []


def fill_disk(f: Fault) -> None:
    """Every free byte of the tmpfs taken by a root-owned file (unbuffered: no byte left to fail at its close)."""
    filler = f.out / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    f.kept["filler"] = filler
    try:
        for chunk in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def free_disk(f: Fault) -> None:
    f.kept.pop("filler").unlink()


def unmount_disk(f: Fault) -> None:
    if f.kept.pop("mounted", False):
        subprocess.run(["umount", "--lazy", str(f.out)], check=False)


# ---- signals


def signals(*sigs: signal.Signals) -> Callable[[Fault], None]:
    """The signals to the CLI (setpriv execs it: the process is the CLI), 0.3 s apart."""
    def inject(f: Fault) -> None:
        assert f.proc is not None
        for n, sig in enumerate(sigs):
            if n:
                time.sleep(0.3)
            f.proc.send_signal(sig)
    return inject


# ---- the lab's hosts (tests/integration/labhosts.py)


def lab_sweep(f: Fault) -> list[str]:
    _lab, inventory = f.request.getfixturevalue("fault_lab")
    return ["--inventory", str(inventory)]


def lab_publishing(f: Fault) -> bool:
    lab, _inventory = f.request.getfixturevalue("fault_lab")
    return lab.ssh("publisher", "test", "-e", f"{REMOTE}/lab/procs/publisher.pid", timeout=20).returncode == 0


def pause_lab_host(f: Fault) -> None:
    """The publisher's host frozen mid-cell (no answer, not even a reset) until the product's SSH keepalives count
    it lost, then back."""
    lab, _inventory = f.request.getfixturevalue("fault_lab")
    lab.pause("publisher")
    f.kept["paused"] = "publisher"
    time.sleep(lost_after_s() + 2)
    unpause_lab_host(f)


def unpause_lab_host(f: Fault) -> None:
    role = f.kept.pop("paused", None)  # the role of the host paused
    if role:
        lab, _inventory = f.request.getfixturevalue("fault_lab")
        lab.unpause(role)


def left_on_lab_hosts(f: Fault) -> list[str]:
    from tests.integration.test_lab_run import ours_on_hosts

    lab, _inventory = f.request.getfixturevalue("fault_lab")
    return ours_on_hosts(lab)


# ---- a fleet over the lab's three publisher hosts, one of them lost (issue 40)

FLEET_DEVICES, FLEET_SAMPLES, FLEET_INTERVAL_S = 30, 20, 1
LOST = "publisher2"  # the role of the host the case freezes: testbed-host-pub2, a share of the fleet
FLEET_HOSTS = ("broker", "router", "publisher", "publisher2", "publisher3")


def lost_host_publishing(f: Fault) -> bool:
    """The lost host's share of the second cell runs (its pidfile)."""
    lab, _inventory = f.request.getfixturevalue("fault_lab")
    return lab.ssh(LOST, "test", "-e", f"{REMOTE}/lab/procs/publisher.pid", timeout=20).returncode == 0


def lose_fleet_host(f: Fault) -> None:
    """Two seconds into its share, pub2 frozen (no answer, not even a reset) until the CLI has exited, then back:
    what it ran is left there for the next lab run on it (the resume's up)."""
    lab, _inventory = f.request.getfixturevalue("fault_lab")
    assert f.proc is not None
    time.sleep(2)
    lab.pause(LOST)
    f.kept["paused"] = LOST
    frozen = time.monotonic()
    try:
        f.proc.wait(timeout=120)
        f.kept["took"] = time.monotonic() - frozen
    finally:
        unpause_lab_host(f)
    f.kept["lost"] = lab.hosts[LOST].name


def lost_host_failed_alone(f: Fault) -> None:
    """The cell ended soon after the freeze, long before the shares' own end: the other hosts' shares were stopped
    (each host's fleet summary: interrupted, fewer messages sent than its share expected); the lost host is named
    in cell.json's warnings as not torn down, and no records came back from it."""
    lab, _inventory = f.request.getfixturevalue("fault_lab")
    run, lost = f.run_dir(1), f.kept["lost"]
    assert f.kept["took"] < 45, f.kept["took"]  # the shares would have run on for up to 20 s, the finish after them
    cell = json.loads((run / "cell.json").read_text())
    assert any(lost in w and "not torn down" in w for w in cell["warnings"]), cell["warnings"]
    for role in ("publisher", "publisher3"):
        host = lab.hosts[role].name
        summary = json.loads((run / "logs" / "hosts" / host / "fleet" / "summary.json").read_text())
        assert summary["interrupted"] is True and summary["messages_sent"] < summary["messages_expected"], (
            host, summary)
    assert not (run / "logs" / "hosts" / lost / "fleet").exists()
    print(f"a publisher host lost mid-fleet: the cell ended {f.kept['took']:.1f} s after it froze: {cell['error']}",
          file=sys.stderr)


def lost_host_back(f: Fault) -> None:
    """From now on the lost host counts too: the resume's up must remove what it kept."""
    f.kept.pop("lost", None)


def left_on_fleet_hosts(f: Fault) -> list[str]:
    """What of ours is on the five hosts: the lost host once the resume ran (before, the product leaves it to the
    next lab run on it and says so); ssh masters and processes here are ours_left's."""
    from tests.integration.test_lab_run import ours_on_hosts

    lab, _inventory = f.request.getfixturevalue("fault_lab")
    lost = f.kept.get("lost")
    return ours_on_hosts(lab, tuple(r for r in FLEET_HOSTS if lab.hosts[r].name != lost))


# ---- the board (tests/integration/board_emu.py)


def _emulator(f: Fault, *args: str) -> None:
    pty = f.user.work / "fault-board.pty"
    pty.unlink(missing_ok=True)
    proc, link = emulate(f.user, "fault-board", *args)
    f.kept.setdefault("emulators", []).append(proc)
    f.spared.append(proc.pid)
    f.kept["pty"] = link


def board_sweep(f: Fault) -> list[str]:
    """board-emu that goes away half-way through the second cell (the first cell's messages, then half)."""
    _emulator(f, "--exit-after-messages", str(SAMPLES * 3 // 2))
    return ["--publisher", "esp32", "--serial-port", str(f.kept["pty"])]


def board_gone(f: Fault) -> None:
    f.kept["emulators"][-1].wait(timeout=120)


def board_back(f: Fault) -> None:
    """The board plugged in again: a new emulator behind the same serial port."""
    _emulator(f)


def board_off(f: Fault) -> None:
    for proc in f.kept.get("emulators", []):
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


# ---- a second user (root, its own checkout's CLI, its own compose project)


def second_user_sweep(f: Fault) -> list[str]:
    from .test_faults import PLAN

    out = f.out.parent / "second-user-root"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log = (f.out.parent / "second-user-root.log").open("w")
    f.kept["second"] = subprocess.Popen([TESTBED, "sweep", *PLAN, "--out", str(out), "--name", "second"],
                                        stdout=log, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    log.close()
    f.kept["second_out"] = out
    return []


def second_user_done(f: Fault) -> None:
    """Both sweeps run side by side: the second user's ends well too, every cell ok."""
    proc = f.kept["second"]
    proc.wait(timeout=300)
    said = (f.out.parent / "second-user-root.log").read_text()
    assert proc.returncode == 0, said[-3000:]
    [bundle] = [p for p in f.kept["second_out"].iterdir() if p.is_dir()]
    cells = json.loads((bundle / "manifest.json").read_text())["cells"]
    assert len(cells) == 2 and {c["status"] for c in cells.values()} == {"ok"}, cells


def second_user_off(f: Fault) -> None:
    proc = f.kept.get("second")
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
