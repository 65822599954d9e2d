"""A lab's broker host gets no password of the publisher's in clear (issue 22, orchestrator/lab/credentials.py): its
run folder holds pki/passwords.hashed (Mosquitto's $7$ hashes, made on the controlling host) and a passwords.txt with
the subscriber's line only. The broker image (a Docker broker host, testbed_broker_runtime: compose) takes the hashed
file as it is: the publisher's password is accepted, a wrong one refused. Needs testbed-broker:latest."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from pathlib import Path

from orchestrator.lab import credentials
from orchestrator.lab.topology import prepare_run_dir
from orchestrator.model.scenario import load_scenario

NAME = "testbed-hashcheck-broker"


def _field(text: str) -> bytes:
    data = text.encode()
    return struct.pack("!H", len(data)) + data


def connack(port: int, user: str, password: str, timeout_s: float = 20.0) -> int:
    """An MQTT 3.1.1 CONNECT with a user name and password; CONNACK's return code (0 accepted, 4/5 refused)."""
    body = _field("MQTT") + bytes([4, 0xC2]) + struct.pack("!H", 30) + _field("hashcheck") + _field(user) + \
        _field(password)
    packet = bytes([0x10, len(body)]) + body
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(packet)
                reply = conn.recv(4)
                if len(reply) == 4 and reply[0] == 0x20:
                    return reply[3]
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the broker never answered a CONNECT")
        time.sleep(0.2)


def test_the_broker_image_takes_the_hashed_password_file_as_it_is(tmp_path: Path) -> None:
    scenario = load_scenario("plain").model_copy(update={"allow_anonymous": False})
    lay, pki = prepare_run_dir(tmp_path / "run", scenario)
    assert pki is not None
    publisher_pw = pki.password_for("publisher")
    # the broker host's share, as lab/remote.py stages it
    made = credentials.made_files("broker", scenario, pki)
    for rel, data in made.items():
        (lay.root / rel).write_bytes(data)
    assert publisher_pw.encode() not in b"".join(made.values())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True, check=False)
    started = subprocess.run(["docker", "run", "-d", "--rm", "--name", NAME, "--label", "io.testbed.owned=true",
                              "-e", "TESTBED_PORT=1883", "-v", f"{lay.root}:/data", "-p", f"127.0.0.1:{port}:1883",
                              "testbed-broker:latest"], capture_output=True, text=True, check=False)
    assert started.returncode == 0, started.stderr
    try:
        assert connack(port, "publisher", publisher_pw) == 0
        assert connack(port, "publisher", publisher_pw + "x") in (4, 5)
        assert connack(port, "subscriber", pki.password_for("subscriber")) == 0
    finally:
        logs = subprocess.run(["docker", "logs", NAME], capture_output=True, text=True, check=False)
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True, check=False)
    assert publisher_pw not in logs.stdout + logs.stderr
