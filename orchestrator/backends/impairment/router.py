"""The router container's path: publisher (network uplink) -> router -> broker (network lab).

The router (compose/testbed.yml, service `router`) is the forwarding hop the userspace delay line works
at (queue.py). It only forwards (ip_forward=1, no capability). The publisher and the broker learn the
way through it from a route their helpers add (NET_ADMIN in their own namespaces); the publisher
connects to the broker's lab address, its TLS server name stays `broker`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from orchestrator.backends import docker
from orchestrator.backends.compose import network_name
from orchestrator.backends.docker import exec_argv
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget, PlanCommand, helper_name
from orchestrator.backends.impairment.queue import line_stats

__all__ = ["RouterPath", "broker_address", "line_stats", "queue_targets", "route_setup", "router_path"]
from orchestrator.errors import TestbedError

LAB, UPLINK = "lab", "uplink"  # compose/testbed.yml's networks; the engine's names are the project's


@dataclass(frozen=True)
class RouterPath:
    publisher: str
    broker: str
    router: str
    publisher_ip: str  # on uplink
    broker_ip: str  # on lab
    router_uplink: str
    router_lab: str
    uplink_net: str  # a.b.c.d/len
    lab_net: str


def _address(container: str, network: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    c = docker.container(container)
    if c is None or network not in c.addresses:
        raise TestbedError(f"container {container} has no address on network {network}",
                           hint="is the router up? (`testbed run --delay-mechanism queue` starts it)")
    return ipaddress.ip_interface(c.addresses[network])


def router_path(publisher: str, broker: str, router: str) -> RouterPath:
    pub, brk = _address(publisher, network_name(UPLINK)), _address(broker, network_name(LAB))
    r_up, r_lab = _address(router, network_name(UPLINK)), _address(router, network_name(LAB))
    return RouterPath(publisher, broker, router, str(pub.ip), str(brk.ip), str(r_up.ip), str(r_lab.ip),
                      str(pub.network), str(brk.network))


def lab_interface(broker: str) -> str:
    """The broker's address on the lab network with its prefix (a.b.c.d/len)."""
    return str(_address(broker, network_name(LAB)))


def broker_address(broker: str) -> str:
    """Where the publisher behind the router connects: the broker's address on the lab network."""
    return str(_address(broker, network_name(LAB)).ip)


def route_setup(path: RouterPath) -> list[PlanCommand]:
    """The routes through the router: the publisher to the lab network, the broker back to uplink."""
    return [
        PlanCommand(label="publisher", argv=exec_argv(helper_name(path.publisher), "ip", "route", "replace",
                                                      path.lab_net, "via", path.router_uplink)),
        PlanCommand(label="publisher", argv=exec_argv(helper_name(path.broker), "ip", "route", "replace",
                                                      path.uplink_net, "via", path.router_lab)),
    ]


def queue_targets(path: RouterPath, *, correlated_loss: bool, interface: str = "eth0") -> list[ImpairmentTarget]:
    """publisher->broker through the router: rate at the publisher's egress, the delay line at the router's
    forwarding hop, loss at the broker's ingress (nft, or the line's Gilbert model when correlated)."""
    return [
        ImpairmentTarget(label="publisher", container=path.publisher, interface=interface),
        ImpairmentTarget(label="publisher", container=path.router, interface=interface, hook=Hook.FORWARD,
                         source_ip=ipaddress.ip_address(path.publisher_ip),
                         peer_ip=ipaddress.ip_address(path.broker_ip), line=True),
        ImpairmentTarget(label="publisher", container=path.broker, interface=interface, hook=Hook.INGRESS,
                         source_ip=ipaddress.ip_address(path.publisher_ip), line=correlated_loss),
    ]
