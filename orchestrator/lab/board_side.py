"""The lab's side of a board (--publisher esp32): the address the board reaches it at, and its clock.

A board sits on the LAN: it connects to the broker's port published on an address of the lab host
(never 127.0.0.1, where docker-proxy would relay the connection and the broker-side capture would see
the relay, not the board) and syncs with the time-echo service published beside it.
"""

from __future__ import annotations

import ipaddress
import socket
import time

from orchestrator.backends import compose
from orchestrator.backends.compose import Topology
from orchestrator.clients import time_echo
from orchestrator.errors import TestbedError


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
