"""The playbooks' extra vars (the plan) for a profile and its targets, and reading their state text (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from orchestrator.backends.impairment.argv import (
    NETEM_MISSING,
    NETEM_MODULE,
    NFT_FAMILY,
    NFT_TABLE,
    OUR_HANDLES,
    apply_argvs,
    check_argvs,
    clear_argvs,
    netem_probe_argv,
    show_argvs,
    uses_netem,
)
from orchestrator.backends.impairment.models import LOCALHOST, Hook, ImpairmentTarget, PlanCommand
from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES
from orchestrator.model.impairment import Direction, Impairment


def validate_targets(imp: Impairment, targets: Sequence[ImpairmentTarget], mechanism: str = "netem") -> None:
    """Refuse target sets that would collide or leave part of the profile unapplied."""
    seen: set[tuple[str, str | None, str, Hook]] = set()
    for t in targets:
        key = (t.host, t.namespace, t.interface, t.hook)
        if key in seen:
            raise TestbedError(
                f"two impairment targets share {t.hook} {t.interface} on {t.host} "
                f"({t.namespace or 'host namespace'})"
            )
        seen.add(key)
    if imp.is_noop:
        return
    for direction in (Direction.PUBLISHER_TO_BROKER, Direction.BROKER_TO_SUBSCRIBER):
        if not imp.direction.covers(direction):
            continue
        ours = [t for t in targets if t.direction is direction]
        queue = mechanism == "queue" and uses_netem(imp)
        needs_egress = (uses_netem(imp) and not queue) or imp.rate_kbit is not None
        needs_ingress = (queue or not uses_netem(imp)) and imp.loss_pct > 0
        delaying = any(t.hook is Hook.FORWARD or t.delays for t in ours)
        if queue and (imp.delay_ms or imp.jitter_ms) and not delaying:
            raise TestbedError(f"impairment {imp.name}: the delay line needs a forwarding hop for {direction} "
                               "(the router container)")
        if queue and imp.loss_correlation_pct and not any(t.hook is Hook.INGRESS and t.line for t in ours):
            raise TestbedError(f"impairment {imp.name}: correlated loss without netem needs the delay line at the "
                               f"receiver's ingress for {direction}")
        if needs_egress and not any(t.hook is Hook.EGRESS for t in ours):
            raise TestbedError(
                f"impairment {imp.name}: no egress target for {direction} "
                "(delay, jitter and rate are applied where the packets leave)"
            )
        if needs_ingress and not any(t.hook is Hook.INGRESS for t in ours):
            raise TestbedError(
                f"impairment {imp.name}: no ingress target for {direction} "
                "(loss without netem is applied where the packets arrive)",
                hint="give the host side of the sender's veth, or a router interface",
            )


def build_plan(imp: Impairment, targets: Sequence[ImpairmentTarget], *, mechanism: str = "netem",
               seed: int = AXES["seed"].default, setup: Sequence[PlanCommand] = ()) -> dict[str, Any]:
    """Extra vars for the playbooks: per inventory host, the argv lists of each step. ``mechanism`` makes
    the delay (netem, or the userspace ``queue``); ``setup`` runs first in the apply step (the router's
    routes)."""
    validate_targets(imp, targets, mechanism)
    hosts: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for t in targets:
        h = hosts.setdefault(t.host, {"check": [], "clear": [], "apply": [], "show": []})
        h["check"] += [c.model_dump() for c in check_argvs(t)]
        h["clear"] += [c.model_dump() for c in clear_argvs(t)]
        h["show"] += [c.model_dump() for c in show_argvs(t)]
        h["apply"] += [PlanCommand(label=t.label, argv=a).model_dump() for a in apply_argvs(imp, t, mechanism, seed)]
    if setup:
        first = hosts.setdefault(LOCALHOST, {"check": [], "clear": [], "apply": [], "show": []})
        first["apply"][:0] = [c.model_dump() for c in setup]
    return {
        "testbed_hosts": ",".join(sorted(hosts)),
        "testbed_profile": imp.name,
        "testbed_needs_netem": imp.needs_netem and mechanism == "netem",
        "testbed_delay_mechanism": mechanism if imp.needs_netem else None,
        # container targets: the probe runs in a helper container on this Docker host, not on an inventory host
        "testbed_netem_probe": netem_probe_argv(in_helper=any(t.container for t in targets)),
        "testbed_netem_missing": f"{NETEM_MISSING}: profile {imp.name} needs delay/jitter/correlated loss "
        f"and tc cannot add a netem qdisc (load or install the {NETEM_MODULE} "
        "kernel module); nothing was applied",
        "testbed_plan": hosts,
    }


def state_blocks(state: str) -> list[tuple[str, str]]:
    """The `show` text as (command line, output) per command (``$ [host] argv`` heads each block); text
    before the first head is one block with an empty head."""
    blocks: list[tuple[str, list[str]]] = []
    for line in state.splitlines():
        if line.startswith("$ ") or not blocks:
            blocks.append((line if line.startswith("$ ") else "", [] if line.startswith("$ ") else [line]))
        else:
            blocks[-1][1].append(line)
    return [(head, "\n".join(body)) for head, body in blocks]


def dropped_packets(state: str) -> int | None:
    """Packets our nft drop rules and delay lines dropped, summed over the state text of `show`; None
    without either. The same command on the same host and namespace (a host with two targets lists its one
    nft table once per target) is counted once."""
    seen: set[str] = set()
    counts: list[int] = []
    for head, body in state_blocks(state):
        if head and head in seen:
            continue
        seen.add(head)
        counts += [int(n) for n in re.findall(r"counter packets (\d+) bytes \d+ drop", body)]
        counts += [int(n) for n in re.findall(r'"dropped": (\d+)', body)]
    return sum(counts) if counts else None


def state_has_ours(state: str) -> bool:
    """True when a show() text still lists one of our qdiscs or the nft table."""
    for line in state.splitlines():
        if line.startswith("qdisc ") and any(f" {h} " in f"{line} " for h in OUR_HANDLES):
            return True
        if line.startswith(f"table {NFT_FAMILY} {NFT_TABLE}") or line.startswith("-N TESTBED_Q"):
            return True
    return False
