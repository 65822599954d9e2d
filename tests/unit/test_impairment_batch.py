"""playbooks/library/testbed_commands.py: consecutive commands into one container share ONE `docker exec`
(a `sh -c` script), yet each keeps its own rc, stdout and stderr, exactly as with an exec of its own.

The module runs as Ansible runs it (python MODULE ARGS_FILE) with a fake `docker` first on PATH that logs
each call and runs the command locally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "playbooks" / "library" / "testbed_commands.py"
FAKE_DOCKER = """#!/bin/sh
# fake docker: log the call, then `docker exec [-d] CONTAINER CMD...` runs CMD here
{ printf '%s' "$*" | tr '\\n' ' '; echo; } >> "$DOCKER_LOG"
shift; [ "$1" = "-d" ] && shift
[ "$1" = "gone" ] && { echo "Error response from daemon: No such container: gone" >&2; exit 1; }
shift; exec "$@"
"""


def _run(tmp_path: Path, commands: list[dict], **extra_env: str) -> tuple[dict, list[str]]:
    (tmp_path / "bin").mkdir(exist_ok=True)
    docker = tmp_path / "bin" / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    log = tmp_path / "docker.log"
    log.unlink(missing_ok=True)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"commands": commands, "changes": False}}))
    env = {**os.environ, "PATH": f"{docker.parent}{os.pathsep}{os.environ['PATH']}", "DOCKER_LOG": str(log),
           **extra_env}
    proc = subprocess.run([sys.executable, str(MODULE), str(args)], capture_output=True, text=True, env=env,
                          timeout=60, cwd=tmp_path)
    result = json.loads(proc.stdout)
    return result, log.read_text().splitlines() if log.exists() else []


def _cmd(container: str, *argv: str, tolerate: tuple[str, ...] = (), detach: bool = False) -> dict:
    return {"label": "publisher", "argv": ["docker", "exec", *(["-d"] if detach else []), container, *argv],
            "tolerate": list(tolerate)}


SCRIPT = "printf 'out %s' \"$1\"; printf 'err\\n' >&2; exit 3"
COMMANDS = [
    _cmd("a", "echo", "one two"),
    _cmd("a", "sh", "-c", SCRIPT, "x", "it's"),
    _cmd("a", "cat", "/nonexistent/file", tolerate=("No such file",)),
    _cmd("a", "printf", "%s\\n", "{", '"eth0"', ";", "$HOME"),
    _cmd("b", "echo", "b"),
    _cmd("a", "true", detach=True),
    _cmd("a", "echo", "after detach"),
]


def test_consecutive_commands_into_one_container_share_one_exec(tmp_path: Path) -> None:
    _, calls = _run(tmp_path, COMMANDS)
    assert len(calls) == 4, calls  # a (4 commands), b, the detached one, a again
    assert calls[0].startswith("exec a sh -c ")
    assert calls[1:] == ["exec b echo b", "exec -d a true", "exec a echo after detach"]


def test_each_batched_command_keeps_its_own_rc_stdout_stderr_and_failed(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, COMMANDS, rc="99", p="1")  # the script's own $rc and $p are not the host's
    items = result["testbed_items"]
    assert [it["item"] for it in items] == COMMANDS
    assert [it["cmd"] for it in items] == [c["argv"] for c in COMMANDS]
    got = [(it["rc"], it["stdout"], it["stderr"], it["failed"]) for it in items]
    assert got[0] == (0, "one two\n", "", False)
    assert got[1] == (3, "out it's", "err\n", True)  # no newline of its own: none added
    assert got[2][0] != 0 and "No such file" in got[2][2] and got[2][3] is False  # tolerated
    # every argument as given; ~ and $VARS expanded on this host as for a command run alone (run_command does)
    assert got[3] == (0, f'{{\n"eth0"\n;\n{os.environ["HOME"]}\n', "", False)
    assert got[4:] == [(0, "b\n", "", False), (0, "", "", False), (0, "after detach\n", "", False)]
    assert result["failed"] is True and "1 of 7 commands failed" in result["msg"]


def test_an_exec_that_fails_fails_every_command_of_its_batch_with_the_engines_error(tmp_path: Path) -> None:
    result, calls = _run(tmp_path, [_cmd("gone", "echo", "x"), _cmd("gone", "true", tolerate=("No such file",))])
    assert len(calls) == 1
    for it in result["testbed_items"]:
        assert it["rc"] == 1 and it["failed"] is True
        assert it["stderr"].strip() == "Error response from daemon: No such container: gone"


@pytest.mark.parametrize("n", [1, 12])
def test_markers_of_ten_and_more_commands_do_not_collide(tmp_path: Path, n: int) -> None:
    result, calls = _run(tmp_path, [_cmd("a", "echo", str(i)) for i in range(n)])
    assert len(calls) == 1
    assert [it["stdout"] for it in result["testbed_items"]] == [f"{i}\n" for i in range(n)]
