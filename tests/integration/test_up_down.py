"""`testbed up --scenario tls`: Mosquitto TLS-only, ChaCha20-Poly1305-only, checked with an independent
TLS client (openssl s_client); `testbed down` leaves nothing and is safe twice."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from orchestrator.paths import state_dir

from .conftest import owned, run_testbed, service_container

HOST_PORT = 18883


def s_client(version_flag: str, cipher_args: list[str]) -> str:
    ca = state_dir() / "session" / "pki" / "ca.crt"
    proc = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{HOST_PORT}", "-servername", "broker",
                           "-CAfile", str(ca), version_flag, *cipher_args], input="", capture_output=True,
                          text=True, timeout=20, check=False)
    return proc.stdout + proc.stderr


def negotiated(text: str) -> str:
    for line in text.splitlines():
        if ", Cipher is " in line:
            return line.split(", Cipher is ")[1].strip()
    return "(none)"


@pytest.fixture(scope="module")
def tls_up() -> Iterator[subprocess.CompletedProcess[str]]:
    """One TLS lab for the three tests below that use it, in this order: two only look at it, the third takes it
    down (so they come first in the file, before any test that brings the lab down or up on its own)."""
    run_testbed("down")
    proc = run_testbed("up", "--scenario", "tls", "--host-port", str(HOST_PORT))
    assert proc.returncode == 0, proc.stderr
    yield proc
    run_testbed("down")


def test_tls_up_only_chacha20_poly1305(tls_up):
    assert "subscriber negotiated TLSv1.2 ECDHE-ECDSA-CHACHA20-POLY1305" in tls_up.stdout
    assert negotiated(s_client("-tls1_2", ["-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305"])) == \
        "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert negotiated(s_client("-tls1_2", ["-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"])) == "(NONE)"
    assert negotiated(s_client("-tls1_3", ["-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"])) == \
        "TLS_CHACHA20_POLY1305_SHA256"
    assert negotiated(s_client("-tls1_3", ["-ciphersuites", "TLS_AES_128_GCM_SHA256"])) == "(NONE)"

    # no plaintext MQTT on the TLS port: a bare CONNECT gets no CONNACK
    connect = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 60, 0, 0])
    with socket.create_connection(("127.0.0.1", HOST_PORT), timeout=5) as s:
        s.sendall(connect)
        s.settimeout(3)
        try:
            reply = s.recv(4)
        except (TimeoutError, ConnectionResetError):
            reply = b""
    assert not reply.startswith(b"\x20\x02")

    status = run_testbed("status")
    for service in ("broker", "capture", "subscriber"):
        assert service in status.stdout
    assert "healthy" in status.stdout


def test_client_without_credentials_is_refused(tls_up):
    ca = state_dir() / "session" / "pki" / "ca.crt"
    proc = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(HOST_PORT), "--cafile", str(ca),
                           "--insecure", "-t", "testbed/sensors", "-m", "x", "-d"],
                          capture_output=True, text=True, timeout=20, check=False)
    assert proc.returncode != 0
    assert "not authorised" in (proc.stdout + proc.stderr).lower() or "connection refused" in \
        (proc.stdout + proc.stderr).lower()


def test_down_removes_everything_and_is_safe_twice(tls_up):
    assert owned("container")
    first = run_testbed("down")
    assert first.returncode == 0, first.stderr
    assert owned("container") == [] and owned("network") == [] and owned("volume") == []
    second = run_testbed("down")
    assert second.returncode == 0 and "testbed is down" in second.stdout


def test_plain_up_delivers_a_message_to_the_subscriber(clean_testbed):
    proc = run_testbed("up", "--scenario", "plain", "--host-port", str(HOST_PORT))
    assert proc.returncode == 0, proc.stderr
    payload = json.dumps({"d": "t", "n": 7, "t": time.time_ns() // 1000})
    subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(HOST_PORT), "-t", "testbed/sensors",
                    "-m", payload], check=True, timeout=10)
    log = state_dir() / "session" / "logs" / "subscriber.csv"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.read_text().count("\n") < 2:
        time.sleep(0.1)
    rows = log.read_text().splitlines()
    assert rows[0] == "seq,t_recv_us,bytes,dup,device"
    assert rows[1].startswith("7,") and rows[1].endswith(f",{len(payload)},0,t")


def test_port_in_use_is_named(clean_testbed):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", HOST_PORT))
        s.listen()
        proc = run_testbed("up", "--scenario", "tls", "--host-port", str(HOST_PORT))
    assert proc.returncode == 1
    assert f"port {HOST_PORT} on 127.0.0.1 is already in use" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert owned("container") == []


def test_doctor_reports_every_check_with_a_status():
    proc = run_testbed("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("docker engine", "docker compose v2", "testbed images", "tshark", "netem"):
        assert name in proc.stdout
    assert "MISSING" not in proc.stdout


def test_doctor_names_the_fix_when_the_engine_is_down():
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock", COLUMNS="200")
    proc = subprocess.run([str(Path(sys.executable).parent / "testbed"), "doctor"], capture_output=True,
                          text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 1
    assert "MISSING" in proc.stdout and "dockerd" in proc.stdout
    assert "required check(s) failed" in proc.stderr


def test_tls13_scenario_negotiates_tls13_chacha20_only(clean_testbed):
    proc = run_testbed("up", "--scenario", "tls13-chacha20", "--host-port", str(HOST_PORT))
    assert proc.returncode == 0, proc.stderr
    assert "TLSv1.3 TLS_CHACHA20_POLY1305_SHA256" in proc.stdout
    assert negotiated(s_client("-tls1_3", [])) == "TLS_CHACHA20_POLY1305_SHA256"
    assert negotiated(s_client("-tls1_3", ["-ciphersuites", "TLS_AES_256_GCM_SHA384"])) == "(NONE)"
    assert negotiated(s_client("-tls1_2", ["-cipher", "ECDHE-ECDSA-CHACHA20-POLY1305"])) == "(NONE)"


def test_up_failing_half_way_leaves_nothing(clean_testbed):
    import threading

    def kill_broker_once_started() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            broker = service_container("broker")
            # a broker that is only created (not yet running) cannot be killed: try again until one is
            if broker != "none" and subprocess.run(["docker", "kill", broker], capture_output=True,
                                                   check=False).returncode == 0:
                return
            time.sleep(0.05)

    record = state_dir() / "session" / "logs" / "containers.json"
    record.unlink(missing_ok=True)
    killer = threading.Thread(target=kill_broker_once_started)
    killer.start()
    proc = run_testbed("up", "--scenario", "tls", "--host-port", str(HOST_PORT))
    killer.join()
    assert proc.returncode == 1, proc.stdout
    assert "Traceback" not in proc.stderr
    assert "broker failed first (exited with code 137)" in proc.stderr, proc.stderr
    # the evidence was saved before the project went down
    states = {c["service"]: c["state"] for c in json.loads(record.read_text())["containers"]}
    assert states["broker"]["exit_code"] == 137
    assert (record.parent / "broker.log").exists()
    assert owned("container") == [] and owned("network") == [] and owned("volume") == []


def _mqtt(*args: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


def test_up_expose_demands_the_sessions_passwords_and_its_acl(clean_testbed):
    """`up --expose` of the (anonymous) plain scenario: reachable beyond loopback, so nobody connects
    anonymously and only the publisher user may write the measured topic (as a board's cell, issue 22)."""
    port = "18884"
    proc = run_testbed("up", "--scenario", "plain", "--expose", "--host-port", port)
    try:
        assert proc.returncode == 0, proc.stderr
        assert "published on ALL interfaces" in proc.stdout and "only user 'publisher' may write" in proc.stdout
        assert "the study's scenario is anonymous" in proc.stdout
        passwords = dict(line.split(":", 1) for line in
                         (state_dir() / "session" / "pki" / "passwords.txt").read_text().splitlines())
        base = ["-h", "127.0.0.1", "-p", port, "-t", "testbed/sensors"]
        anonymous = _mqtt("mosquitto_pub", *base, "-m", "anon")
        assert anonymous.returncode != 0 and "not authorised" in (anonymous.stdout + anonymous.stderr).lower()
        # the subscriber user reads the topic; what it publishes there is dropped by the ACL, the publisher's is not
        sub = subprocess.Popen(["mosquitto_sub", *base, "-u", "subscriber", "-P", passwords["subscriber"],
                                "-C", "1", "-W", "20", "-v"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        time.sleep(1.0)
        intruder = _mqtt("mosquitto_pub", *base, "-u", "subscriber", "-P", passwords["subscriber"], "-m", "intruder")
        assert intruder.returncode == 0, intruder.stderr  # MQTT 3.1.1: a denied publish is dropped silently
        time.sleep(0.5)
        publisher = _mqtt("mosquitto_pub", *base, "-u", "publisher", "-P", passwords["publisher"], "-m", "reading")
        assert publisher.returncode == 0, publisher.stderr
        out, _ = sub.communicate(timeout=30)
        assert out.strip() == "testbed/sensors reading", out  # the first (and only) message is the publisher's
    finally:
        run_testbed("down")
    assert owned("container") == [] and owned("network") == []
