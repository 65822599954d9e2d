"""Impairment on a board's path (--publisher esp32): where it can act, and what the capture then sees.

A board's own egress is its radio, and its path to the lab crosses no hop of ours (no router container
sits between a board on the LAN and the broker's published port). So the profile acts at the first place
that is ours: the broker's ingress, on packets from outside the lab network (through the published
port, after Docker's DNAT: the board's address is kept, so nothing else of ours matches):

* loss: nft's random drop at the netdev ingress hook (plain loss), or the delay line's Gilbert model;
* delay and jitter: the userspace delay line at PREROUTING (queue mechanism; netem cannot delay arriving
  packets, and a board's egress is not ours);
* rate: refused (a bottleneck lives at a sender's egress).

The broker-side capture taps the interface BEFORE both hooks. It sees every segment the board sent,
also the dropped ones (their resends show as retransmissions, as for the virtual publisher), each at
the time it ARRIVED: the capture's one-way delay and uplink do not contain the injected delay, while
the subscriber's end-to-end latency and every round trip (TCP, CONNECT -> CONNACK, PUBLISH -> PUBACK on
the board's clock) do.
"""

from __future__ import annotations

import ipaddress

from orchestrator.backends.impairment import router
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget
from orchestrator.backends.impairment.targets import targets_for_containers
from orchestrator.errors import TestbedError
from orchestrator.model import rules
from orchestrator.model.impairment import Direction, Impairment

HINTS = {"board-rate-is-its-radio": "a profile without rate_kbit for board cells",
         "board-delays-at-the-broker": "--delay-mechanism auto (or queue)"}


def check_board_profile(impairment: Impairment, requested: str) -> None:
    """Refuse, before anything starts, what cannot act on a board's path (the rules of model/rules.py)."""
    try:
        rules.check_profile(impairment, {"publisher": "esp32", "delay_mechanism": requested})
    except rules.RuleViolation as exc:
        raise TestbedError(str(exc), hint=HINTS.get(exc.rule)) from None


def board_mechanism(impairment: Impairment) -> str | None:
    """Delay, jitter and correlated loss on a board's path are always the delay line's."""
    return "queue" if impairment.needs_netem else None


def board_targets(impairment: Impairment, containers: dict[str, str]) -> list[ImpairmentTarget]:
    """The broker's ingress for the board's packets (from outside the lab network); with direction
    ``both`` also the broker->subscriber link, as for the virtual publisher."""
    broker = containers["broker"]
    lab = ipaddress.ip_interface(router.lab_interface(broker)).network
    targets = [ImpairmentTarget(label="publisher", container=broker, interface="eth0", hook=Hook.INGRESS,
                                source_outside=lab, line=impairment.needs_netem,
                                delays=bool(impairment.delay_ms or impairment.jitter_ms))]
    if impairment.direction.covers(Direction.BROKER_TO_SUBSCRIBER):
        targets += targets_for_containers(Direction.BROKER_TO_SUBSCRIBER, containers)
    return targets


def where_on_board_path(impairment: Impairment, lab_net: str) -> str:
    """What the record and the report say about where the profile acted and what the capture saw."""
    parts = []
    if impairment.loss_pct:
        parts.append(f"loss {impairment.loss_pct:g} % at the broker's ingress (packets from outside {lab_net})")
    if impairment.delay_ms or impairment.jitter_ms:
        parts.append(f"delay {impairment.delay_ms:g} +/- {impairment.jitter_ms:g} ms by the delay line at the "
                     "broker's PREROUTING")
    return ("; ".join(parts) + ". The board's own radio hop is not ours to impair. The broker-side capture "
            "taps the interface before these hooks: it sees every segment the board sent (dropped ones too; "
            "their resends count as retransmissions), at the time it arrived, so the capture's one-way delay "
            "and uplink do NOT include the injected delay; the subscriber's end-to-end latency and the round "
            "trips (TCP, CONNECT->CONNACK, PUBLISH->PUBACK on the board's clock) do.")
