"""Issue 22 with the emulated board, as our users run it (the docker-group user, its own clone):

- a board bundle whose TLS cells authenticate by certificate, archived: a byte search of the unpacked tarball
  finds none of the run's passwords, none of its private keys' base64 and no key-log line of any label, and
  the CLI's "left out" lines name exactly the files the tarball lacks;
- a board cell on a LAN address (a network namespace this test creates, its veth's host side as
  --board-host; nothing leaves this machine): the broker is published on that address only, an anonymous
  client from the namespace's address is refused, and a publish to the measured topic by another of the
  run's users (the subscriber, who may read it) is not delivered, while the same client receives the board's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .board_emu import emulate as _emulate
from .conftest import owned
from .docker_user import DockerUser

CERT_SCENARIO = """\
name: tls-cert
description: the study's TLS suite, the clients authenticated by certificate
transport: tls
port: 8883
tls:
  min_version: "1.2"
  max_version: "1.2"
  ciphers_tls12: [ECDHE-ECDSA-CHACHA20-POLY1305]
  key_type: ecdsa-p256
  client_auth: certificate
  client_max_version: "1.2"
"""
# an NSS key-log line of any label (TLS 1.2 CLIENT_RANDOM, the TLS 1.3 *_SECRET ones), bare or behind KEYLOG
KEYLOG_LINE = re.compile(rb"(CLIENT_RANDOM|RSA|[A-Z_]+_SECRET(_\d+)?)\s+[0-9A-Fa-f]{32,}\s+[0-9A-Fa-f]{32,}")


@pytest.fixture(scope="module")
def board(docker_user: DockerUser) -> Iterator[Path]:
    proc, pty = _emulate(docker_user, "secrets-board", "--seed", "22")
    yield pty
    proc.terminate()
    proc.wait(timeout=30)


def _secret_values(bundle: Path) -> tuple[set[bytes], set[bytes]]:
    """(every password of the bundle's run folders, every base64 line of their private keys)."""
    passwords: set[bytes] = set()
    key_lines: set[bytes] = set()
    for f in bundle.glob("runs/*/pki/passwords.txt"):
        passwords |= {ln.split(b":", 1)[1] for ln in f.read_bytes().splitlines() if b":" in ln}
    for f in bundle.glob("runs/*/pki/*.key"):
        key_lines |= {ln for ln in f.read_bytes().splitlines() if ln and not ln.startswith(b"-----")}
    return passwords, key_lines


def test_an_archived_certificate_auth_board_bundle_holds_no_secret(docker_user: DockerUser, board: Path) -> None:
    docker_user.testbed("down")
    scenario = docker_user.work / "tls-cert.yaml"
    scenario.write_text(CERT_SCENARIO)
    os.chown(scenario, docker_user.uid, docker_user.gid)
    out = docker_user.mkdir(docker_user.work / "secrets-sweep")
    proc = docker_user.testbed("sweep", "--scenarios", f"plain,{scenario}", "--payloads", "65", "--samples", "20",
                               "--interval", "50ms", "--publisher", "esp32", "--serial-port", str(board),
                               "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bundle = next(p for p in out.iterdir() if p.is_dir())
    cells = json.loads((bundle / "manifest.json").read_text())["cells"]
    assert {c["status"] for c in cells.values()} == {"ok"} and len(cells) == 2, cells
    tls_run = next(bundle / "runs" / c for c in cells if c.startswith("tls-cert"))
    # what there is to leak: the key logs (board and subscriber), the serial log's KEYLOG lines, the keys
    assert KEYLOG_LINE.search((tls_run / "keylogs" / "publisher.keys").read_bytes())
    assert KEYLOG_LINE.search((tls_run / "logs" / "serial.log").read_bytes())
    assert (tls_run / "pki" / "publisher.key").is_file() and (tls_run / "pki" / "publisher.crt").is_file()
    passwords, key_lines = _secret_values(bundle)
    assert len(passwords) >= 4 and len(key_lines) >= 6

    archived = docker_user.testbed("archive", str(bundle))
    assert archived.returncode == 0, archived.stdout + archived.stderr
    tarball = bundle.with_name(bundle.name + ".tar.gz")
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        packed = {m.name.split("/", 1)[1] for m in members}
        data = b"\0".join(tar.extractfile(m).read() for m in members)  # type: ignore[union-attr]
    leaks = [p for p in passwords if p in data] + [k for k in key_lines if k in data]
    assert leaks == [], f"{len(leaks)} secret value(s) in the archive"
    assert b"PRIVATE KEY-----" not in data
    found = KEYLOG_LINE.search(data)
    assert found is None, found.group(0)[:40] if found else None
    assert b"KEYLOG " not in data
    # the CLI names exactly the files the tarball lacks
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
               if p.is_file() and not p.name.startswith(".")}  # a dot file is no part of a bundle
    lacking = on_disk - packed
    lines = archived.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("left out "))
    listed = [ln.strip() for ln in lines[head + 1:] if ln.startswith("  ")]
    assert lines[head].startswith(f"left out {len(lacking)} secret file(s)"), lines[head]
    assert sorted(listed) == sorted(lacking), (listed, sorted(lacking))
    assert {"logs/serial.log", "keylogs/publisher.keys", "pki/publisher.key", "pki/passwords.txt"} <= \
        {"/".join(x.split("/")[2:]) for x in listed}
    # the plain cell's broker demanded the run's passwords (a board's broker is reachable beyond loopback):
    # its capture held them in the clear CONNECTs, and the archive's copy has them overwritten, sizes kept
    plain_capture = next(x for x in packed if x.startswith("runs/plain") and x.endswith("capture.pcapng"))
    assert f"in the archive's copy of {plain_capture}" in archived.stdout
    with tarfile.open(tarball) as tar:
        member = tar.getmember(f"{bundle.name}/{plain_capture}")
    assert member.size == (bundle / plain_capture).stat().st_size
    verified = docker_user.testbed("verify", str(tarball))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert owned("container") == [] and owned("network") == []


# ------------------------------------------------------------------------------------------ a LAN address
def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture
def lan() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this host by a veth pair: (namespace, host side's address, its own)."""
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace needs root")
    tag = os.getpid() % 100000
    ns, host_if, ns_if = f"tbsec{tag}", f"tbs{tag}h", f"tbs{tag}n"
    octet = 20 + tag % 200
    host_ip, ns_ip = f"10.222.{octet}.1", f"10.222.{octet}.2"
    _sh("ip", "netns", "add", ns)
    try:
        _sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _sh("ip", "link", "set", ns_if, "netns", ns)
        _sh("ip", "addr", "add", f"{host_ip}/24", "dev", host_if)
        _sh("ip", "link", "set", host_if, "up")
        _sh("ip", "-n", ns, "addr", "add", f"{ns_ip}/24", "dev", ns_if)
        _sh("ip", "-n", ns, "link", "set", ns_if, "up")
        _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", ns, "route", "add", "default", "via", host_ip)
        yield ns, host_ip, ns_ip
    finally:
        _sh("ip", "link", "del", host_if, check=False)
        _sh("ip", "netns", "del", ns, check=False)


INTRUDER = textwrap.dedent("""\
    import json, sys, time
    import paho.mqtt.client as mqtt
    host, port, topic, user, password = sys.argv[1:6]
    V2 = mqtt.CallbackAPIVersion.VERSION2

    def connect(client):
        got = {}
        client.on_connect = lambda c, u, f, rc, p: got.setdefault("rc", str(rc))
        client.connect(host, int(port), keepalive=10)
        client.loop_start()
        deadline = time.monotonic() + 10
        while "rc" not in got and time.monotonic() < deadline:
            time.sleep(0.05)
        return got.get("rc")

    anon = mqtt.Client(V2, client_id="lan-anonymous")
    anon_rc = connect(anon)
    anon.loop_stop()
    anon.disconnect()
    received = []
    user_client = mqtt.Client(V2, client_id="lan-intruder")
    user_client.username_pw_set(user, password)
    user_client.on_message = lambda c, u, m: received.append(m.payload.decode(errors="replace"))
    user_rc = connect(user_client)
    user_client.subscribe(topic, qos=0)
    time.sleep(2)
    before = len(received)
    info = user_client.publish(topic, json.dumps({"d": "intruder", "n": 999999, "t": 1}).encode(), qos=1)
    info.wait_for_publish(timeout=10)
    time.sleep(3)
    user_client.loop_stop()
    user_client.disconnect()
    print(json.dumps({"anonymous_rc": anon_rc, "user_rc": user_rc, "board_messages": before,
                      "intruder_delivered": any("intruder" in p for p in received), "received": len(received)}))
    """)


def _wait_publishing(run: Path, proc: subprocess.Popen[str], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (run / "logs" / "board_messages.csv").is_file() and (run / "pki" / "passwords.txt").is_file():
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before the board published: {proc.communicate()}")
        time.sleep(0.2)
    pytest.fail("the board did not start publishing")


def test_a_board_cell_on_a_lan_address_refuses_strangers(docker_user: DockerUser, board: Path,
                                                         lan: tuple[str, str, str]) -> None:
    ns, host_ip, ns_ip = lan
    docker_user.testbed("down")
    run = docker_user.mkdir(docker_user.work / "lan-run") / "cell"
    proc = docker_user.popen("run", "--scenario", "plain", "--payload", "65", "--samples", "80", "--interval",
                             "200ms", "--publisher", "esp32", "--serial-port", str(board), "--board-host", host_ip,
                             "--out", str(run))
    try:
        _wait_publishing(run, proc)
        ports = _sh("docker", "ps", "--filter", "label=com.docker.compose.service=broker", "--filter",
                    f"label=io.testbed.owner={docker_user.name}", "--format", "{{.Ports}}").stdout.strip()
        published = [x.strip() for x in ports.split(",") if "->" in x]  # (an EXPOSEd port alone is not published)
        assert published == [f"{host_ip}:1883->1883/tcp"], ports  # on the board's address only, never 0.0.0.0
        subscriber_pw = next(ln.split(":", 1)[1] for ln in (run / "pki" / "passwords.txt").read_text().splitlines()
                             if ln.startswith("subscriber:"))
        probe = _sh("ip", "netns", "exec", ns, sys.executable, "-c", INTRUDER, host_ip, "1883", "testbed/sensors",
                    "subscriber", subscriber_pw)
        seen = json.loads(probe.stdout.strip().splitlines()[-1])
    finally:
        stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    print(seen)
    assert seen["anonymous_rc"] == "Not authorized", seen  # from the namespace's address
    assert seen["user_rc"] == "Success" and seen["board_messages"] > 0, seen  # the path works: the board talks
    assert seen["intruder_delivered"] is False, seen  # ... and the other user's publish does not
    subscriber_csv = (run / "logs" / "subscriber.csv").read_text()
    assert "intruder" not in subscriber_csv and subscriber_csv.count("\n") == 81
    status = json.loads((run / "logs" / "subscriber_status.json").read_text())
    assert status["unparsed"] == 0 and status["received"] == 80
    cell = json.loads((run / "cell.json").read_text())
    exposure = cell["exposure"]
    assert exposure["published_on"] == host_ip and exposure["baseline_auth"] == "anonymous"
    assert exposure["auth"] == "password" and exposure["differs_from_baseline"] is True
    assert f"published on {host_ip} only" in stdout + stderr
    # the broker saw both of the stranger's CONNECTs come from its own address (no relay in between)
    connects = _sh("tshark", "-r", str(run / "capture" / "capture.pcapng"), "-Y",
                   f"ip.src == {ns_ip} && mqtt.msgtype == 1", "-T", "fields", "-e", "frame.number").stdout.split()
    assert len(connects) == 2, connects
    assert owned("container") == [] and owned("network") == []
