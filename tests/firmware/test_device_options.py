"""The device programs' one option table (firmware/platformio/lib/testbed_core/src/device_options.def): the
binaries describe exactly what the .def says, their check modes accept and refuse by it without a network,
and --password-file keeps the MQTT password off the command line. (A new line in the .def alone reaching vdevice,
the fleet and the board's RUN parser: tests/firmware/test_throwaway_device_axis.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from device_options_def import read_def
from fwtest_support import (
    MOSQUITTO,
    HostBuild,
    Pki,
    free_port,
    mosquitto_running,
    need_tool,
)

PLAIN_BODY = "id=c1\nhost=127.0.0.1\nport=1883\ntransport=plain\npayload=65\nsamples=3\ninterval_us=1000\nqos=0\n"


def _run(argv: list[str | Path], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.mark.parametrize("program", ["vdevice", "fleet"])
def test_describe_options_is_the_def(host_build: HostBuild, program: str) -> None:
    proc = _run([host_build.build_dir / program, "--describe-options"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [o.as_json() for o in read_def()]


def test_the_def_has_the_device_axes() -> None:
    options = {o.name: o for o in read_def()}
    assert (options["payload"].min, options["payload"].max, options["payload"].default) == (1, 4096, 65)
    assert (options["qos"].min, options["qos"].max, options["qos"].default) == (0, 2, 0)
    assert (options["seed"].min, options["seed"].max, options["seed"].default) == (0, 2**64 - 1, 1)
    assert options["connection"].choices == ("persistent", "reconnect", "resume-id", "resume-ticket")
    assert options["close"].choices == ("disconnect", "drop")
    assert {"vdevice", "fleet"} <= set(options["password_file"].programs)
    assert "board" not in options["password_file"].programs  # the board's password comes in its RUN


@pytest.mark.parametrize("argv,env,error", [
    (["--payload", "5000"], {}, 'InvalidArgument: --payload: expected an integer 1..4096, got "5000"'),
    (["--payload=0"], {}, 'InvalidArgument: --payload: expected an integer 1..4096, got "0"'),
    (["--qos", "3"], {}, 'InvalidArgument: --qos: expected an integer 0..2, got "3"'),
    (["--interval-ms", "3600001"], {},
     'InvalidArgument: --interval-ms: expected milliseconds 0..3600000 (decimals allowed), got "3600001"'),
    (["--samples", "1000001"], {}, 'InvalidArgument: --samples: expected an integer 1..1000000, got "1000001"'),
    (["--connection", "sometimes"], {},
     'InvalidArgument: --connection: expected persistent, reconnect, resume-id or resume-ticket, got "sometimes"'),
    ([], {"TESTBED_SEED": "-1"}, 'InvalidArgument: TESTBED_SEED: expected an integer 0..18446744073709551615, '
                                 'got "-1"'),
    (["--sync-host", "h"], {}, "InvalidArgument: unknown option: --sync-host (vdevice --help lists its options)"),
    (["--payload", "40"], {}, "PayloadTooSmall: payload of 40 bytes is below the minimum of 62 bytes"),
    (["--transport", "tls"], {}, "InvalidArgument: --transport tls needs --ca FILE"),
    (["--password", "p"], {}, "InvalidArgument: --password needs --username"),
])
def test_vdevice_check_refuses_naming_the_error(host_build: HostBuild, argv: list[str], env: dict[str, str],
                                                error: str) -> None:
    proc = _run([host_build.vdevice, "--check", *argv], env)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(f"vdevice: error {error}"), proc.stderr


def test_check_modes_accept_without_a_network(host_build: HostBuild, pki: Pki) -> None:
    # 192.0.2.1 (TEST-NET-1) answers nobody: a check that connected would fail or hang.
    common = ["--host", "192.0.2.1", "--transport", "tls", "--ca", str(pki.ca), "--payload", "100", "--qos", "1",
              "--interval-ms", "0.5", "--seed", "18446744073709551615"]
    started = time.monotonic()
    vdevice = _run([host_build.vdevice, "--check", *common, "--connection", "resume-ticket", "--per-connection", "5"])
    fleet = _run([host_build.build_dir / "fleet", "--check", *common, "--devices", "5000",
                  "--out-dir", "/nonexistent/x"])
    assert (vdevice.returncode, vdevice.stdout, vdevice.stderr) == (0, "ok\n", "")
    assert (fleet.returncode, fleet.stdout, fleet.stderr) == (0, "ok\n", "")
    assert not Path("/nonexistent/x").exists() and time.monotonic() - started < 10


@pytest.mark.parametrize("argv,error", [
    (["--devices", "1000001"], 'InvalidArgument: --devices: expected an integer 1..1000000, got "1000001"'),
    (["--devices", "2", "--connect-rate", "10001"],
     'InvalidArgument: --connect-rate: expected a number 0.01..10000 (decimals allowed), got "10001"'),
    (["--devices", "2", "--send-log", "x.csv"],
     "InvalidArgument: unknown option: --send-log (fleet --help lists its options)"),
    (["--devices", "2", "--connection", "reconnect", "--sleep-ms", "86400001"],
     'InvalidArgument: --sleep-ms: expected milliseconds 0..86400000 (decimals allowed), got "86400001"'),
    (["--devices", "2", "--payload", "4097"], 'InvalidArgument: --payload: expected an integer 1..4096, got "4097"'),
    ([], "InvalidArgument: --devices N is required (1..1000000)"),
])
def test_fleet_check_refuses_naming_the_error(host_build: HostBuild, tmp_path: Path, argv: list[str],
                                              error: str) -> None:
    proc = _run([host_build.build_dir / "fleet", "--check", "--out-dir", tmp_path / "o", *argv])
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(f"fleet: error {error}"), proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("extra,error", [
    ("", None),
    ("mode=resume-id\nper_connection=1000000\nclose=drop\nsync_host=127.0.0.1\nsync_port=9\n", None),
    ("mqtt=5\nsession=persistent\nsession_expiry_s=0\ntopic_alias=on\ninflight=256\nack_timeout_ms=1\n", None),
    ("inflight=257\n", 'InvalidArgument: RUN body key "inflight": "257" is not an integer 1..256'),
    ("topic_alias=on\n", 'InvalidArgument: RUN body key "topic_alias": on needs mqtt=5 (topic aliases are MQTT 5\'s)'),
    ("seed=1\n", 'UnknownKey: RUN body key "seed" is unknown to protocol version 4'),
    ("send_log=x\n", 'UnknownKey: RUN body key "send_log" is unknown to protocol version 4'),
    ("per_connection=1000001\n", 'InvalidArgument: RUN body key "per_connection": "1000001" is not an integer '
                                 "1..1000000"),
    ("mode=sometimes\n", 'UnsupportedMode: RUN body key "mode": "sometimes" is unknown to protocol version 4'),
    ("keylog=2\n", 'InvalidArgument: RUN body key "keylog": "2" is not an integer 0..1'),
    ("ciphers=X\n", 'InvalidArgument: RUN body key "ciphers" only goes with transport=tls'),
])
def test_board_check_run_uses_the_boards_parser(host_build: HostBuild, tmp_path: Path, extra: str,
                                                error: str | None) -> None:
    body = tmp_path / "run.txt"
    body.write_text(PLAIN_BODY + extra)
    proc = _run([host_build.board_emu, "--check-run", body])
    if error is None:
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")
    else:
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr.startswith(f"board-emu: error {error}"), proc.stderr


def test_board_check_run_refuses_what_the_board_refuses_before_ack(host_build: HostBuild, tmp_path: Path) -> None:
    body = tmp_path / "run.txt"
    body.write_text(PLAIN_BODY.replace("payload=65", "payload=40"))
    proc = _run([host_build.board_emu, "--check-run", body])
    assert proc.returncode == 2 and proc.stderr.startswith("board-emu: error PayloadTooSmall: "), proc.stderr
    body.write_text(PLAIN_BODY.replace("transport=plain", "transport=tls") + "ca=x\nciphers=NOPE\n")
    proc = _run([host_build.board_emu, "--check-run", body])
    assert proc.returncode == 2 and proc.stderr.startswith("board-emu: error UnknownCipher: "), proc.stderr


def _shown(argv: list[str | Path], env: dict[str, str] | None = None) -> dict[str, object]:
    proc = _run(argv, env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    shown = json.loads(proc.stdout)
    assert isinstance(shown, dict)
    return shown


def test_show_config_is_the_configuration_made(host_build: HostBuild, tmp_path: Path) -> None:
    """Every option a program takes, as given or the .def's default; a password is not shown."""
    shown = _shown([host_build.vdevice, "--show-config", "--interval-ms", "0.5", "--mqtt", "5", "--username", "u",
                    "--password", "s3cret"])
    takes = [o for o in read_def() if "vdevice" in o.programs]
    assert list(shown) == [o.name for o in takes]
    assert {k: v for k, v in shown.items() if k not in ("interval_ms", "mqtt", "username", "password")} == {
        o.name: o.default for o in takes if o.name not in ("interval_ms", "mqtt", "username", "password")}
    assert (shown["interval_ms"], shown["mqtt"], shown["username"], shown["password"]) == (0.5, "5", "u", "***")
    body = tmp_path / "run.txt"
    body.write_text(PLAIN_BODY + "session_expiry_s=0\n")
    run = _shown([host_build.board_emu, "--show-run", body])
    assert list(run) == [o.name for o in read_def() if "board" in o.programs]
    assert (run["session_expiry_s"], run["inflight"], run["interval_us"]) == (0, 1, 1000)


# ------------------------------------------------------------------ --password-file
@dataclass(frozen=True)
class PasswordBroker:
    port: int
    log: Path


@pytest.fixture
def password_broker(tmp_path: Path) -> Iterator[PasswordBroker]:
    """Mosquitto on 127.0.0.1 that takes user `dev` with password `s3cret-on-no-argv` only."""
    need_tool(MOSQUITTO, "mosquitto")
    passwd = need_tool("mosquitto_passwd", "mosquitto")
    readable = Path(tempfile.mkdtemp(prefix="tb-users-"))  # Mosquitto opens it after dropping root
    readable.chmod(0o755)
    users = readable / "users"
    subprocess.run([passwd, "-b", "-c", str(users), "dev", "s3cret-on-no-argv"], check=True, capture_output=True)
    users.chmod(0o644)
    port = free_port()
    conf, log = tmp_path / "mosquitto.conf", tmp_path / "mosquitto.log"
    conf.write_text(f"persistence false\nlog_dest stderr\nlog_type all\nlistener {port} 127.0.0.1\n"
                    f"allow_anonymous false\npassword_file {users}\n")
    conf.chmod(0o644)
    try:
        with mosquitto_running(conf, log, port):  # nothing of it is kept (persistence false)
            yield PasswordBroker(port, log)
    finally:
        shutil.rmtree(readable, ignore_errors=True)


def _publish(host_build: HostBuild, broker: PasswordBroker, password_file: Path, tmp_path: Path
             ) -> tuple[subprocess.CompletedProcess[str], str]:
    """vdevice with --password-file; returns the run and its command line as the kernel showed it."""
    argv = [str(host_build.vdevice), "--port", str(broker.port), "--username", "dev", "--password-file",
            str(password_file), "--qos", "1", "--samples", "3", "--interval-ms", "150",
            "--summary", str(tmp_path / "summary.json")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin"})
    cmdline = ""
    deadline = time.monotonic() + 5
    while proc.poll() is None and not cmdline and time.monotonic() < deadline:
        try:
            cmdline = (Path("/proc") / str(proc.pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            break
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), cmdline


def test_password_file_publishes_with_no_password_on_the_command_line(
        host_build: HostBuild, password_broker: PasswordBroker, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret-on-no-argv\nsecond line ignored\n")
    os.chmod(secret, 0o600)
    proc, cmdline = _publish(host_build, password_broker, secret, tmp_path)
    assert proc.returncode == 0, proc.stderr + password_broker.log.read_text(errors="replace")
    assert json.loads((tmp_path / "summary.json").read_text())["messages_sent"] == 3  # each PUBACKed (QoS 1)
    assert "vdevice" in cmdline and "--password-file" in cmdline and "s3cret" not in cmdline
    assert all("s3cret" not in a for a in proc.args)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    refused, _ = _publish(host_build, password_broker, wrong, tmp_path)
    assert refused.returncode == 1 and "vdevice: error ConnackRefused" in refused.stderr, refused.stderr


def test_password_file_problems_are_refused(host_build: HostBuild, tmp_path: Path) -> None:
    missing = _run([host_build.vdevice, "--check", "--username", "u", "--password-file", tmp_path / "none"])
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"vdevice: error InvalidArgument: --password-file {tmp_path / 'none'}: ")
    secret = tmp_path / "password"
    secret.write_text("p\n")
    both = _run([host_build.vdevice, "--check", "--username", "u", "--password", "p", "--password-file", secret])
    assert (both.returncode, both.stderr) == (
        2, "vdevice: error InvalidArgument: --password and --password-file: give one of them\n")
    alone = _run([host_build.build_dir / "fleet", "--check", "--devices", "2", "--out-dir", tmp_path / "o",
                  "--password-file", secret])
    assert (alone.returncode, alone.stderr) == (
        2, "fleet: error InvalidArgument: --password needs --username (MQTT 3.1.1 section 3.1.2.9)\n")
