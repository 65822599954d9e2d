"""The programs playbooks/lab.yml runs on a lab host, here on this one: the process manager with pidfiles
(orchestrator/clients/labhost.py) and the clock exchange against the time echo (clients/clock_probe.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from orchestrator.clients import clock_probe, labhost
from orchestrator.clients.time_echo import TimeEcho

REPO = Path(__file__).resolve().parents[2]


def lh(folder: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.clients.labhost", "--dir", str(folder), *args],
                          capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_a_process_runs_under_its_supervisor_and_is_stopped_by_its_own_pid(tmp_path: Path) -> None:
    assert lh(tmp_path, "start", "--name", "sleeper", "--", "sleep", "30").returncode == 0
    pid = int((tmp_path / "procs" / "sleeper.pid").read_text())
    assert labhost.alive(pid)
    assert lh(tmp_path, "start", "--name", "sleeper", "--", "sleep", "30").returncode == labhost.EXIT_FAILED
    waited = lh(tmp_path, "wait", "--name", "sleeper", "--timeout", "0.3")
    assert waited.returncode == labhost.EXIT_TIMEOUT and "still running" in waited.stderr
    assert lh(tmp_path, "stop", "--name", "sleeper", "--signal", "INT").returncode == 0
    assert not labhost.alive(pid)
    assert labhost.exit_code(tmp_path, "sleeper") == -2  # SIGINT reached it with its default action
    assert lh(tmp_path, "stop", "--name", "sleeper").returncode == 0  # safe when it has ended


def test_exit_codes_output_and_a_program_that_cannot_start(tmp_path: Path) -> None:
    done = lh(tmp_path, "start", "--name", "job", "--wait", "10", "--", "sh", "-c", "echo said; exit 3")
    assert done.returncode == 0 and "job exit 3" in done.stdout
    assert (tmp_path / "procs" / "job.log").read_text() == "said\n"
    assert json.loads((tmp_path / "procs" / "job.argv").read_text()) == ["sh", "-c", "echo said; exit 3"]
    bad = lh(tmp_path, "start", "--name", "bad", "--", "/nonexistent/program")
    assert bad.returncode == labhost.EXIT_FAILED and "No such file" in bad.stderr
    assert labhost.exit_code(tmp_path, "bad") == 127


def test_ready_waits_for_its_conditions_and_fails_at_once_when_a_process_ended(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"subscribed": False}))
    lh(tmp_path, "start", "--name", "quick", "--", "true")
    lh(tmp_path, "wait", "--name", "quick", "--timeout", "10")
    ended = lh(tmp_path, "ready", "--timeout", "10", "--json-true", str(status), "subscribed", "--alive", "quick")
    assert ended.returncode == labhost.EXIT_FAILED and "quick exited (0)" in ended.stderr
    status.write_text(json.dumps({"subscribed": False, "error": "CONNACK refused: 5"}))
    refused = lh(tmp_path, "ready", "--timeout", "10", "--json-true", str(status), "subscribed")
    assert refused.returncode == labhost.EXIT_FAILED and "CONNACK refused" in refused.stderr
    log = tmp_path / "sub.csv"
    log.write_text("seq,t\n0,1\n1,2\n")
    assert lh(tmp_path, "ready", "--timeout", "5", "--lines", str(log), "2").returncode == 0
    assert lh(tmp_path, "ready", "--timeout", "0.2", "--lines", str(log), "3").returncode == labhost.EXIT_TIMEOUT


def test_wait_gives_up_when_the_lab_folder_is_removed(tmp_path: Path) -> None:
    folder = tmp_path / "lab"
    lh(folder, "start", "--name", "sleeper", "--", "sleep", "30")
    waiter = subprocess.Popen([sys.executable, "-m", "orchestrator.clients.labhost", "--dir", str(folder), "wait",
                               "--name", "sleeper", "--timeout", "60"], cwd=REPO, env={"PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert lh(folder, "stop-all").returncode == 0
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    waiter.communicate(timeout=20)
    assert waiter.returncode in (0, labhost.EXIT_GONE)  # it ended (exit code seen) or saw the folder go


def test_finish_stops_in_order_and_packs_what_exists(tmp_path: Path) -> None:
    lh(tmp_path, "start", "--name", "a", "--", "sleep", "30")
    (tmp_path / "run" / "logs").mkdir(parents=True)
    (tmp_path / "run" / "logs" / "x.csv").write_text("1\n")
    done = lh(tmp_path, "finish", "--stop", "a:INT:5", "--stop", "never-started", "--pack", "out.tgz",
              "run/logs", "run/capture", "procs")
    assert done.returncode == 0, done.stderr
    assert labhost.exit_code(tmp_path, "a") == -2
    with tarfile.open(tmp_path / "out.tgz") as tar:
        names = set(tar.getnames())
    assert {"run/logs/x.csv", "procs/a.log", "procs/a.rc"} <= names and not any(n.startswith("run/capture")
                                                                                  for n in names)


def test_listening_reads_proc_net_tcp(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text("  sl  local_address rem_address   st\n"
                                  "   0: 00000000:22B3 00000000:0000 0A 00000000:00000000\n"
                                  "   1: 0100007F:075B 0100007F:9C40 01 00000000:00000000\n")
    assert labhost.listening(8883, tmp_path) is True
    assert labhost.listening(1883, tmp_path) is False  # established, not listening


@pytest.fixture
def echo() -> TimeEcho:
    server = TimeEcho("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_probe_exchanges_with_the_time_echo(tmp_path: Path, echo: TimeEcho) -> None:
    out = tmp_path / "clock" / "pre.csv"
    host, port = echo.address
    assert clock_probe.main(["--host", host, "--port", str(port), "--count", "6", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "t1_us,t2_us,t3_us,t4_us" and len(lines) == 7
    t1, t2, t3, t4 = map(int, lines[1].split(","))
    assert t1 <= t2 <= t3 <= t4  # one clock here: the exchange is ordered
    assert clock_probe.parse_reply(b"short", 1, t1) is None


def test_the_probe_fails_when_nothing_answers(tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never answering
        assert clock_probe.main(["--host", "127.0.0.1", "--port", str(port), "--count", "2",
                                 "--out", str(tmp_path / "x.csv")]) == 1


def test_the_recorded_command_line_leaves_the_password_out(tmp_path: Path) -> None:
    lh(tmp_path, "start", "--name", "p", "--wait", "10", "--", "true", "--username", "publisher",
       "--password", "s3cret")
    assert json.loads((tmp_path / "procs" / "p.argv").read_text()) == ["true", "--username", "publisher",
                                                                      "--password", "***"]

