"""The lab's side of a board (--publisher esp32): the address the board reaches it at, and its clock.

A board sits on the LAN: it connects to the broker's port published on an address of the lab host
(never 127.0.0.1, where docker-proxy would relay the connection and the broker-side capture would see
the relay, not the board) and syncs with the time-echo service published beside it.

Both are published on that address ONLY (never 0.0.0.0: --board-host refuses an address that names no
interface; `testbed up --expose` is the one way to publish on every interface, on purpose), and a broker reachable
beyond loopback is closed to strangers (:class:`Exposure`): where the study's scenario is anonymous the board and
the subscriber authenticate with the run's own passwords (``allow_anonymous false``; a difference from the
study's baseline, recorded in cell.json), and an ACL lets only the run's publisher user write the measured topic.
The topic and the payload stay byte-identical; the CONNECT packets carry a user name and a password.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.backends import compose
from orchestrator.backends.compose import Topology
from orchestrator.clients import time_echo
from orchestrator.errors import TestbedError
from orchestrator.lab.brokerconf import PUBLISHER_USER, SUBSCRIBER_USER
from orchestrator.model.scenario import Scenario


def is_wildcard(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address that names no interface: unspecified (0.0.0.0, ::, also as ::ffff:0.0.0.0), the "this network"
    block 0.0.0.0/8, a broadcast or a multicast address. Published on it, a port is on every interface (or none)."""
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    v4 = mapped or (ip if isinstance(ip, ipaddress.IPv4Address) else None)
    if v4 is not None:
        return v4 in ipaddress.ip_network("0.0.0.0/8") or v4.is_multicast or v4 == ipaddress.IPv4Address(
            "255.255.255.255")
    return ip.is_unspecified or ip.is_multicast


def lab_address(given: str | None = None) -> str:
    """The lab host's address a board reaches: ``given``, else the source address of its default route."""
    if given:
        try:
            ip = ipaddress.ip_address(given)
        except ValueError as exc:
            raise TestbedError(f"--board-host {given!r} is not an IP address",
                               hint="mbedTLS 2.28 on the board verifies a DNS name, so it connects by IP") from exc
        if ip.is_loopback:
            raise TestbedError(f"--board-host {given} is a loopback address: a board cannot reach it, and "
                               "docker-proxy would relay the connection", hint="give the lab host's LAN address")
        if is_wildcard(ip):
            raise TestbedError(f"--board-host {given} is no interface's address: it would publish the board's broker "
                               "on every interface of this host",
                               hint="give the address of the interface the board reaches (e.g. --board-host "
                                    "192.168.1.20; `ip -br addr` lists them)")
        return given
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel picks the route's source
            address = str(s.getsockname()[0])
    except OSError as exc:
        raise TestbedError(f"this host has no IPv4 default route to find its LAN address: {exc}",
                           hint="give it: --board-host <the lab host's address on the board's network>") from exc
    if ipaddress.ip_address(address).is_loopback:
        raise TestbedError("this host's default route leaves from a loopback address", hint="--board-host <address>")
    return address


def start_time_echo(topo: Topology, address: str, timeout_s: float = 20.0) -> int:
    """Start the time-echo service (published on the same bind as the broker) and wait until it answers
    at ``address`` (a board that asks too early gets ICMP port unreachable and no pre-cell samples)."""
    compose.start_service(topo, compose.TIME_ECHO)
    port = compose.TIME_ECHO_PORT
    request = time_echo.WIRE.pack(time_echo.MAGIC, time_echo.VERSION, time_echo.KIND_REQUEST, 0, 1, 0, 0, 0, 0)
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                s.sendto(request, (address, port))
                if len(s.recvfrom(64)[0]) == time_echo.WIRE.size:
                    return port
            except OSError:  # refused (not listening yet) or no answer within 0.2 s
                time.sleep(0.1)
    raise TestbedError(f"the time-echo service does not answer at {address}:{port}/udp within {timeout_s:g} s",
                       evidence=compose.logs([compose.TIME_ECHO]),
                       hint="a firewall on this host may drop UDP to that port")


@dataclass(frozen=True)
class Exposure:
    """A broker a board reaches: where it is published, and the access it then demands."""

    address: str  # the only host address the broker's port and the time-echo service are published on
    baseline: Scenario  # the study's scenario
    scenario: Scenario  # as run: an anonymous baseline gets the run's passwords
    topic: str

    @property
    def auth(self) -> str:
        tls = self.scenario.tls
        return "certificate" if tls is not None and tls.client_auth == "certificate" else "password"

    @property
    def baseline_auth(self) -> str:
        return "anonymous" if self.baseline.anonymous else self.auth

    def facts(self) -> dict[str, Any]:
        """For cell.json: where the broker was reachable, how it authenticated, and how that differs from the
        study's baseline."""
        differs = self.baseline_auth != self.auth
        return {"published_on": self.address, "time_echo": f"{self.address}:{compose.TIME_ECHO_PORT}/udp",
                "auth": self.auth, "baseline_auth": self.baseline_auth, "differs_from_baseline": differs,
                "difference": ("the study's broker is anonymous; reachable beyond loopback, this one demands the "
                               "run's own password (its CONNECT packets carry a user name and a password; the "
                               "topic and the payload are unchanged)") if differs else None,
                "acl": {PUBLISHER_USER: f"write {self.topic}", SUBSCRIBER_USER: f"read {self.topic}",
                        "anyone else": "nothing"}}

    def line(self) -> str:
        """What the terminal is told."""
        auth = "a per-run password (the study's broker is anonymous)" if self.baseline.anonymous else \
            f"{self.auth} auth"
        return (f"broker and time-echo published on {self.address} only (the board's address, not 0.0.0.0); "
                f"{auth}; only '{PUBLISHER_USER}' may publish to {self.topic}")


def with_auth(scenario: Scenario) -> Scenario:
    """``scenario`` as an exposed broker runs it: an anonymous one authenticates with passwords."""
    if not scenario.anonymous:
        return scenario
    if scenario.tls is None:
        return scenario.model_copy(update={"allow_anonymous": False})
    return scenario.model_copy(update={"tls": scenario.tls.model_copy(update={"client_auth": "password"})})


def board_exposure(scenario: Scenario, board_host: str | None, topic: str) -> Exposure:
    """The exposure of a board's cell: the lab's address the board reaches (``--board-host``, else the
    default route's source address) and the scenario with authentication."""
    return Exposure(lab_address(board_host), scenario, with_auth(scenario), topic)
