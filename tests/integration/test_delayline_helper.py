"""The delay line runs in the impairment helper (NET_ADMIN only), in a container's network namespace.

A UDP echo between two containers: the helper joined to the client's namespace queues the client's
packets to the peer (iptables NFQUEUE, no bypass) and testbed-delayline holds them. The round trip
grows by the configured delay; the line's stats account for every packet; a killed line stops the
traffic (fail closed) instead of letting it through unimpaired.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from orchestrator.backends.impairment.argv import HELPER_IMAGE
from orchestrator.backends.impairment.helpers import helper_options

PY_IMAGE = "testbed-subscriber:latest"  # has python3
QUEUE = "7357"
STATS = "/dev/shm/testbed-delayline.json"  # /dev/shm stays writable in a --read-only container
ECHO_SERVER = ("import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',9999))\n"
               "while True:\n d,a=s.recvfrom(64)\n s.sendto(d,a)\n")
ECHO_CLIENT = ("import socket,sys,time,statistics,json\nhost,n=sys.argv[1],int(sys.argv[2])\n"
               "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(0.5)\nrtt=[];lost=0\n"
               "for i in range(n):\n t=time.monotonic_ns()\n s.sendto(b'x%d'%i,(host,9999))\n try:\n"
               "  s.recvfrom(64);rtt.append((time.monotonic_ns()-t)/1e6)\n except OSError:\n  lost+=1\n"
               " time.sleep(0.005)\nprint(json.dumps({'median':statistics.median(rtt) if rtt else None,"
               "'lost':lost}))\n")


def docker(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture
def pair() -> Iterator[dict[str, str]]:
    tag = f"tbdl{os.getpid()}"
    names = {"client": f"{tag}-client", "server": f"{tag}-server", "helper": f"{tag}-client-netadmin"}
    try:
        docker("network", "create", tag)
        docker("run", "-d", "--name", names["server"], "--network", tag, "--entrypoint", "python3", PY_IMAGE,
               "-c", ECHO_SERVER)
        docker("run", "-d", "--name", names["client"], "--network", tag, "--entrypoint", "sleep", PY_IMAGE, "600")
        docker("run", "-d", "--name", names["helper"], *helper_options(names["client"]), HELPER_IMAGE)
        names["server_ip"] = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                                    names["server"]).stdout.strip()
        yield names
    finally:
        docker("rm", "-f", names["client"], names["server"], names["helper"], check=False)
        docker("network", "rm", tag, check=False)


def _echo(p: dict[str, str], n: int = 100) -> dict:
    out = docker("exec", p["client"], "python3", "-c", ECHO_CLIENT, p["server_ip"], str(n), timeout=300)
    return json.loads(out.stdout)


def _stats(p: dict[str, str]) -> dict:
    return json.loads(docker("exec", p["helper"], "cat", STATS).stdout)


def test_the_helper_runs_the_delay_line_with_net_admin_only_and_it_fails_closed(pair: dict[str, str]) -> None:
    base = _echo(pair)
    assert base["lost"] == 0 and base["median"] < 5, base
    rule = ["-t", "mangle", "-A", "POSTROUTING", "-o", "eth0", "-d", pair["server_ip"], "-p", "udp",
            "-j", "NFQUEUE", "--queue-num", QUEUE]
    docker("exec", pair["helper"], "iptables-nft", *rule)
    docker("exec", "-d", pair["helper"], "testbed-delayline", "--queue", QUEUE, "--delay-ms", "20",
           "--stats", STATS, "--stats-interval-ms", "100")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if docker("exec", pair["helper"], "test", "-s", STATS, check=False).returncode == 0:
            break
        time.sleep(0.1)
    delayed = _echo(pair)
    added = delayed["median"] - base["median"]
    assert delayed["lost"] == 0 and 19.0 <= added <= 22.0, (base, delayed)
    time.sleep(0.3)
    st = _stats(pair)
    assert st["queued"] >= 100 and st["accepted"] + st["dropped"] + st["in_flight"] == st["queued"], st
    assert st["healthy"] is True and st["dropped"] == 0
    # kill the line with the rule still in place: no packet may pass unimpaired
    docker("exec", pair["helper"], "sh", "-c", f"kill -KILL {st['pid']}")
    time.sleep(0.3)
    dead = _echo(pair, n=10)
    assert dead["lost"] == 10, dead
