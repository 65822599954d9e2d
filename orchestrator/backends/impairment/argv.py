"""Pure builders of the tc and nft command lines (argv lists) the playbooks run; nothing runs here.

Only our own objects are named: qdisc handles ``7e57:``-``7e59:`` and the nft table
``inet testbed_impair``. Unit tests assert these argvs exactly.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence

from orchestrator.backends.docker import exec_argv, run_argv
from orchestrator.backends.impairment import queue
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget, PlanCommand
from orchestrator.model.axes import AXES
from orchestrator.model.impairment import Distribution, Impairment

ROOT_HANDLE = "7e57:"
NETEM_HANDLE = "7e58:"
TBF_HANDLE = "7e59:"
OUR_HANDLES = (ROOT_HANDLE, NETEM_HANDLE, TBF_HANDLE)
NFT_FAMILY = "inet"
NFT_TABLE = "testbed_impair"
TBF_LATENCY_MS = 100
TBF_MIN_BURST_BYTES = 1600  # one full Ethernet frame fits; 5 % of 250 kbit/s over 1 s
HTB_PASS_RATE = "10gbit"
NETEM_MODULE = "sch_netem"
NETEM_MISSING = "kernel lacks sch_netem"

# stderr fragments meaning "nothing of ours is there" (clear and show tolerate them)
ABSENT_QDISC = ["Invalid handle", "Cannot find device", "cannot open", "No such file or directory"]
ABSENT_DEVICE = ["Cannot find device", "cannot open"]  # the namespace or interface is gone
ABSENT_TABLE = ["No such file or directory", "cannot open", "Cannot find device"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def enter_argv(target: ImpairmentTarget) -> list[str]:
    """Prefix that runs a command in the target's namespace: `docker exec` in its helper container,
    nsenter on an inventory host, nothing for the host namespace."""
    if target.helper:
        return exec_argv(target.helper)
    return ["nsenter", f"--net={target.netns_path}"] if target.netns_path else []


def _ms(value: float) -> str:
    return f"{value:g}ms"


def _pct(value: float) -> str:
    return f"{value:g}%"


def netem_options(imp: Impairment) -> list[str]:
    """netem arguments for delay, jitter, distribution and loss (correlation included)."""
    opts: list[str] = []
    if imp.delay_ms or imp.jitter_ms:
        opts += ["delay", _ms(imp.delay_ms)]
        if imp.jitter_ms:
            opts.append(_ms(imp.jitter_ms))
            if imp.distribution is not Distribution.UNIFORM:
                opts += ["distribution", imp.distribution.value]
    if imp.loss_pct:
        opts += ["loss", "random", _pct(imp.loss_pct)]
        if imp.loss_correlation_pct:
            opts.append(_pct(imp.loss_correlation_pct))
    return opts


def tbf_burst_bytes(rate_kbit: int) -> int:
    """Bucket size: 10 ms of traffic, at least one full frame."""
    return max(TBF_MIN_BURST_BYTES, math.ceil(rate_kbit * 1000 / 8 / 100))


def tbf_options(rate_kbit: int) -> list[str]:
    return [
        "tbf",
        "rate",
        f"{rate_kbit}kbit",
        "burst",
        str(tbf_burst_bytes(rate_kbit)),
        "latency",
        f"{TBF_LATENCY_MS}ms",
    ]


def nft_loss_match(loss_pct: float) -> list[str]:
    """``numgen random mod M < N``: whole percent with mod 100, else 0.01 % steps with mod 10000."""
    if float(loss_pct).is_integer():
        return ["numgen", "random", "mod", "100", "<", str(int(loss_pct))]
    return ["numgen", "random", "mod", "10000", "<", str(round(loss_pct * 100))]


def _peer_match(peer: IPAddress) -> tuple[str, list[str]]:
    """tc's protocol and u32 match for packets towards ``peer``."""
    if peer.version == 4:
        return "ip", ["match", "ip", "dst", f"{peer}/32"]
    return "ipv6", ["match", "ip6", "dst", f"{peer}/128"]


def _nft_addr_match(address: IPAddress, field: str) -> list[str]:
    """nft's ``ip|ip6 daddr|saddr ADDRESS``."""
    return ["ip" if address.version == 4 else "ip6", field, str(address)]


def uses_netem(imp: Impairment) -> bool:
    return imp.needs_netem


def applies_to(imp: Impairment, target: ImpairmentTarget) -> bool:
    return not imp.is_noop and imp.direction.covers(target.direction)


def _qdisc(pre: list[str], verb: str, interface: str, parent: str | None, handle: str,
           kind: Sequence[str]) -> list[str]:
    """``tc qdisc VERB dev IFACE root|parent PARENT handle HANDLE KIND...``; ``parent`` None is the root."""
    where = ["root"] if parent is None else ["parent", parent]
    return pre + ["tc", "qdisc", verb, "dev", interface, *where, "handle", handle, *kind]


def _root_egress_argvs(pre: list[str], interface: str, netem: list[str], rate: int | None) -> list[list[str]]:
    """Everything the interface sends: netem at the root with tbf below it, or tbf alone at the root."""
    cmds: list[list[str]] = []
    if netem:
        cmds.append(_qdisc(pre, "replace", interface, None, ROOT_HANDLE, ["netem", *netem]))
        if rate is not None:
            cmds.append(_qdisc(pre, "add", interface, f"{ROOT_HANDLE}1", TBF_HANDLE, tbf_options(rate)))
    elif rate is not None:
        cmds.append(_qdisc(pre, "replace", interface, None, ROOT_HANDLE, tbf_options(rate)))
    return cmds


def _peer_egress_argvs(pre: list[str], interface: str, peer: IPAddress, netem: list[str],
                       rate: int | None) -> list[list[str]]:
    """Only traffic to the peer: htb root whose unclassified traffic passes directly (default 0),
    one class matched by a u32 filter on the destination, the impairment below that class."""
    dev = ["dev", interface]
    proto, match = _peer_match(peer)
    cls = f"{ROOT_HANDLE}1"
    cmds = [
        _qdisc(pre, "replace", interface, None, ROOT_HANDLE, ["htb", "default", "0"]),
        pre + ["tc", "class", "add", *dev, "parent", ROOT_HANDLE, "classid", cls,
               "htb", "rate", HTB_PASS_RATE, "quantum", "60000"],
    ]
    parent = cls
    if netem:
        cmds.append(_qdisc(pre, "add", interface, parent, NETEM_HANDLE, ["netem", *netem]))
        parent = f"{NETEM_HANDLE}1"
    if rate is not None:
        cmds.append(_qdisc(pre, "add", interface, parent, TBF_HANDLE, tbf_options(rate)))
    cmds.append(pre + ["tc", "filter", "add", *dev, "parent", ROOT_HANDLE, "protocol", proto, "prio", "1",
                       "u32", *match, "flowid", cls])
    return cmds


def egress_argvs(imp: Impairment, target: ImpairmentTarget, mechanism: str = "netem") -> list[list[str]]:
    """tc commands for an egress target: netem and/or tbf, optionally only towards ``peer_ip``. With the
    ``queue`` mechanism the delay is the line's (queue.py) and only tbf stays here."""
    netem = netem_options(imp) if uses_netem(imp) and mechanism == "netem" else []
    if not netem and imp.rate_kbit is None:
        return []
    pre = enter_argv(target)
    if target.peer_ip is None:
        return _root_egress_argvs(pre, target.interface, netem, imp.rate_kbit)
    return _peer_egress_argvs(pre, target.interface, target.peer_ip, netem, imp.rate_kbit)


def ingress_argvs(imp: Impairment, target: ImpairmentTarget, mechanism: str = "netem",
                  seed: int = AXES["seed"].default) -> list[list[str]]:
    """nft commands for an ingress target: random drop of arriving packets (loss without netem); with the
    ``queue`` mechanism correlated loss is the delay line's Gilbert model at that same place."""
    if uses_netem(imp) and mechanism == "netem":
        return []
    line = queue.delay_line_argvs(imp, target, seed) if queue.runs_line(imp, target) else []
    if not imp.loss_pct or (line and imp.loss_correlation_pct):
        return line
    pre = enter_argv(target)
    chain = f"{target.label}_{target.interface}".replace(".", "_").replace("-", "_").replace(":", "_")
    peer: list[str] = []
    if target.peer_ip is not None:
        peer = _nft_addr_match(target.peer_ip, "daddr")
    if target.source_ip is not None:
        peer += _nft_addr_match(target.source_ip, "saddr")
    if target.source_outside is not None:
        peer += ["ip" if target.source_outside.version == 4 else "ip6", "saddr", "!=", str(target.source_outside)]
    table = [NFT_FAMILY, NFT_TABLE]
    return line + [
        pre + ["nft", "add", "table", *table],
        pre + ["nft", "add", "chain", *table, chain, "{", "type", "filter", "hook", "ingress",
               "device", f'"{target.interface}"', "priority", "0", ";", "policy", "accept", ";", "}"],
        pre + ["nft", "add", "rule", *table, chain, *peer, *nft_loss_match(imp.loss_pct), "counter", "drop"],
    ]


def apply_argvs(imp: Impairment, target: ImpairmentTarget, mechanism: str = "netem",
                seed: int = AXES["seed"].default) -> list[list[str]]:
    """Everything to run on ``target`` for ``imp`` (after clearing); empty when it does not apply."""
    if not applies_to(imp, target):
        return []
    if target.hook is Hook.FORWARD:
        return queue.delay_line_argvs(imp, target, seed) if mechanism == "queue" and (imp.delay_ms or imp.jitter_ms) \
            else []
    if target.hook is Hook.EGRESS:
        return egress_argvs(imp, target, mechanism)
    return ingress_argvs(imp, target, mechanism, seed)


def _command(target: ImpairmentTarget, argv: list[str], tolerate: Sequence[str] = ()) -> PlanCommand:
    """``argv`` run in the target's namespace, labelled with its direction."""
    return PlanCommand(label=target.label, argv=enter_argv(target) + argv, tolerate=list(tolerate))


def clear_argvs(target: ImpairmentTarget) -> list[PlanCommand]:
    """Remove only our root qdisc (by handle) and our nft table; each step is safe when absent."""
    if target.hook is Hook.FORWARD:
        return queue.clear_commands(target)
    cmds = [_command(target, ["tc", "qdisc", "del", "dev", target.interface, "root", "handle", ROOT_HANDLE],
                     ABSENT_QDISC)]
    if target.hook is Hook.INGRESS:
        # `add table` is idempotent, so the delete that follows always has something to delete.
        cmds += [
            _command(target, ["nft", "add", "table", NFT_FAMILY, NFT_TABLE], ABSENT_TABLE),
            _command(target, ["nft", "delete", "table", NFT_FAMILY, NFT_TABLE], ABSENT_TABLE),
        ]
        if target.line:  # a Gilbert-loss line there (queue mechanism)
            cmds += queue.clear_commands(target)
    return cmds


def show_argvs(target: ImpairmentTarget) -> list[PlanCommand]:
    if target.hook is Hook.FORWARD:
        return queue.show_commands(target)
    lines = queue.show_commands(target) if target.line else []
    return lines + [
        _command(target, ["tc", "qdisc", "show", "dev", target.interface], ABSENT_DEVICE),
        _command(target, ["nft", "list", "table", NFT_FAMILY, NFT_TABLE], ABSENT_TABLE),
    ]


def check_argvs(target: ImpairmentTarget) -> list[PlanCommand]:
    """Preflight: the namespace can be entered and the interface exists (changes nothing)."""
    return [_command(target, ["ip", "link", "show", "dev", target.interface])]


HELPER_IMAGE = "testbed-netadmin:latest"
NETEM_PROBE = ["qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]


def helper_probe_argv(tool: str, *args: str) -> list[str]:
    """``tool args`` in a throwaway helper container with its own empty network namespace and
    NET_ADMIN only, removed when the command ends: what the kernel the containers run on can do."""
    return run_argv(HELPER_IMAGE, *args, options=["--network", "none", "--cap-drop", "ALL", "--cap-add", "NET_ADMIN",
                                                  "--security-opt", "no-new-privileges", "--read-only", "--user",
                                                  "0:0", "--entrypoint", tool])


def netem_probe_argv(in_helper: bool = True) -> list[str]:
    """Adds netem to the loopback of a throwaway namespace that vanishes when the command ends: in a
    helper container (this Docker host), or with unshare (an inventory host, as root)."""
    if in_helper:
        return helper_probe_argv("tc", *NETEM_PROBE)
    return ["unshare", "--net", "tc", *NETEM_PROBE]
