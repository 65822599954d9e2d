"""Apply, show and clear network impairments with ansible-runner driving ``playbooks/``.

Where each mechanism goes (see docs/impairment.md for the measurements behind it):

* ``egress`` targets get tc qdiscs: netem (delay, jitter, correlated loss) and tbf (rate). A
  qdisc on the sender's own interface is where a link's delay and bottleneck live.
* ``ingress`` targets get the nftables random drop (loss without netem). It must sit where the
  packets ARRIVE (the host side of the sender's veth, or a router's interface): an nft drop on
  a local sender's egress is reported back to TCP, which silently sends the segment again, so
  no loss happens on the wire (measured: 92 drops, 0 retransmissions).

All command lines are built here by small pure functions (one source of truth); the playbooks
only run the argv lists they receive as extra vars, so they stay usable by hand with a plan
file (``python -m orchestrator.backends.impairment plan ...``). Only our own objects are
touched: qdisc handles ``7e57:``-``7e59:`` and the nft table ``inet testbed_impair``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, IPvAnyAddress, ValidationError, field_validator

from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Direction, Distribution, Impairment, load_impairment
from orchestrator.signals import sigint_deferred

PLAYBOOK_DIR = Path(__file__).resolve().parents[3] / "playbooks"  # the source checkout's playbooks/
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
LOCALHOST = "localhost"

# stderr fragments meaning "nothing of ours is there" (clear and show tolerate them)
ABSENT_QDISC = ["Invalid handle", "Cannot find device", "cannot open", "No such file or directory"]
ABSENT_DEVICE = ["Cannot find device", "cannot open"]  # the namespace or interface is gone
ABSENT_TABLE = ["No such file or directory", "cannot open", "Cannot find device"]
ROLE_DIRECTION = {"publisher": Direction.PUBLISHER_TO_BROKER, "broker": Direction.BROKER_TO_SUBSCRIBER}


class Hook(StrEnum):
    EGRESS = "egress"
    INGRESS = "ingress"


class ImpairmentTarget(BaseModel):
    """One place traffic is impaired: an interface in a network namespace on an inventory host.

    ``label`` is the sending side of the direction: ``publisher`` (publisher->broker traffic) or
    ``broker`` (broker->subscriber traffic, with ``peer_ip`` = the subscriber's address so the
    broker's other traffic is untouched). ``netns_path`` None means the host's own namespace.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    netns_path: str | None = None
    interface: str = Field(pattern=r"^[A-Za-z0-9_.:@-]{1,15}$")
    peer_ip: IPvAnyAddress | None = None
    source_ip: IPvAnyAddress | None = None  # ingress: only packets from this sender are dropped
    hook: Hook = Hook.EGRESS
    host: str = LOCALHOST

    @field_validator("label")
    @classmethod
    def _known_label(cls, value: str) -> str:
        if value not in ROLE_DIRECTION:
            raise ValueError(f"must be one of {', '.join(ROLE_DIRECTION)} (the sending side of a direction)")
        return value

    @field_validator("netns_path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"must be an absolute path such as /proc/1234/ns/net (got {value!r})")
        return value

    @property
    def direction(self) -> Direction:
        return ROLE_DIRECTION[self.label]

    def describe(self) -> str:
        where = self.netns_path or "host namespace"
        peer = f", peer {self.peer_ip}" if self.peer_ip else ""
        peer += f", from {self.source_ip}" if self.source_ip else ""
        return f"{self.label} {self.hook} {self.interface} ({self.host}: {where}{peer})"


class PlanCommand(BaseModel):
    """One argv for the playbooks, with the stderr fragments that mean 'already absent'."""

    model_config = ConfigDict(extra="forbid")

    label: str
    argv: list[str]
    tolerate: list[str] = []


class ImpairmentRecord(BaseModel):
    """What was applied where, and the tc/nft state before and after (for the run folder)."""

    model_config = ConfigDict(extra="forbid")

    impairment: Impairment
    targets: list[ImpairmentTarget]
    before: str
    after: str
    before_clear: str | None = None  # at the end of the block: nft counters hold the packets dropped
    after_clear: str | None = None


# ----------------------------------------------------------------------------- pure argv builders


def enter_argv(target: ImpairmentTarget) -> list[str]:
    """Prefix that runs a command in the target's namespace (nothing for the host namespace)."""
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


def _peer_match(peer: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[str, list[str]]:
    if peer.version == 4:
        return "ip", ["match", "ip", "dst", f"{peer}/32"]
    return "ipv6", ["match", "ip6", "dst", f"{peer}/128"]


def uses_netem(imp: Impairment) -> bool:
    return imp.needs_netem


def applies_to(imp: Impairment, target: ImpairmentTarget) -> bool:
    return not imp.is_noop and imp.direction.covers(target.direction)


def egress_argvs(imp: Impairment, target: ImpairmentTarget) -> list[list[str]]:
    """tc commands for an egress target: netem and/or tbf, optionally only towards ``peer_ip``."""
    pre = enter_argv(target)
    dev = ["dev", target.interface]
    netem = netem_options(imp) if uses_netem(imp) else []
    rate = imp.rate_kbit
    if not netem and rate is None:
        return []
    cmds: list[list[str]] = []
    if target.peer_ip is None:
        if netem:
            cmds.append(
                pre + ["tc", "qdisc", "replace", *dev, "root", "handle", ROOT_HANDLE, "netem", *netem]
            )
            if rate is not None:
                cmds.append(
                    pre
                    + [
                        "tc",
                        "qdisc",
                        "add",
                        *dev,
                        "parent",
                        f"{ROOT_HANDLE}1",
                        "handle",
                        TBF_HANDLE,
                        *tbf_options(rate),
                    ]
                )
        elif rate is not None:
            cmds.append(
                pre + ["tc", "qdisc", "replace", *dev, "root", "handle", ROOT_HANDLE, *tbf_options(rate)]
            )
        return cmds
    # Only traffic to the peer: htb root whose unclassified traffic passes directly (default 0),
    # one class matched by a u32 filter on the destination, the impairment below that class.
    proto, match = _peer_match(target.peer_ip)
    cmds.append(pre + ["tc", "qdisc", "replace", *dev, "root", "handle", ROOT_HANDLE, "htb", "default", "0"])
    cmds.append(
        pre
        + [
            "tc",
            "class",
            "add",
            *dev,
            "parent",
            ROOT_HANDLE,
            "classid",
            f"{ROOT_HANDLE}1",
            "htb",
            "rate",
            HTB_PASS_RATE,
            "quantum",
            "60000",
        ]
    )
    parent = f"{ROOT_HANDLE}1"
    if netem:
        cmds.append(
            pre + ["tc", "qdisc", "add", *dev, "parent", parent, "handle", NETEM_HANDLE, "netem", *netem]
        )
        parent = f"{NETEM_HANDLE}1"
    if rate is not None:
        cmds.append(
            pre + ["tc", "qdisc", "add", *dev, "parent", parent, "handle", TBF_HANDLE, *tbf_options(rate)]
        )
    cmds.append(
        pre
        + [
            "tc",
            "filter",
            "add",
            *dev,
            "parent",
            ROOT_HANDLE,
            "protocol",
            proto,
            "prio",
            "1",
            "u32",
            *match,
            "flowid",
            f"{ROOT_HANDLE}1",
        ]
    )
    return cmds


def ingress_argvs(imp: Impairment, target: ImpairmentTarget) -> list[list[str]]:
    """nft commands for an ingress target: random drop of arriving packets (loss without netem)."""
    if uses_netem(imp) or not imp.loss_pct:
        return []
    pre = enter_argv(target)
    chain = f"{target.label}_{target.interface}".replace(".", "_").replace("-", "_").replace(":", "_")
    peer: list[str] = []
    if target.peer_ip is not None:
        peer = ["ip" if target.peer_ip.version == 4 else "ip6", "daddr", str(target.peer_ip)]
    if target.source_ip is not None:
        peer += ["ip" if target.source_ip.version == 4 else "ip6", "saddr", str(target.source_ip)]
    return [
        pre + ["nft", "add", "table", NFT_FAMILY, NFT_TABLE],
        pre
        + [
            "nft",
            "add",
            "chain",
            NFT_FAMILY,
            NFT_TABLE,
            chain,
            "{",
            "type",
            "filter",
            "hook",
            "ingress",
            "device",
            f'"{target.interface}"',
            "priority",
            "0",
            ";",
            "policy",
            "accept",
            ";",
            "}",
        ],
        pre
        + [
            "nft",
            "add",
            "rule",
            NFT_FAMILY,
            NFT_TABLE,
            chain,
            *peer,
            *nft_loss_match(imp.loss_pct),
            "counter",
            "drop",
        ],
    ]


def apply_argvs(imp: Impairment, target: ImpairmentTarget) -> list[list[str]]:
    """Everything to run on ``target`` for ``imp`` (after clearing); empty when it does not apply."""
    if not applies_to(imp, target):
        return []
    if target.hook is Hook.EGRESS:
        return egress_argvs(imp, target)
    return ingress_argvs(imp, target)


def clear_argvs(target: ImpairmentTarget) -> list[PlanCommand]:
    """Remove only our root qdisc (by handle) and our nft table; each step is safe when absent."""
    pre = enter_argv(target)
    cmds = [
        PlanCommand(
            label=target.label,
            tolerate=ABSENT_QDISC,
            argv=pre + ["tc", "qdisc", "del", "dev", target.interface, "root", "handle", ROOT_HANDLE],
        )
    ]
    if target.hook is Hook.INGRESS:
        # `add table` is idempotent, so the delete that follows always has something to delete.
        cmds += [
            PlanCommand(
                label=target.label,
                tolerate=ABSENT_TABLE,
                argv=pre + ["nft", "add", "table", NFT_FAMILY, NFT_TABLE],
            ),
            PlanCommand(
                label=target.label,
                tolerate=ABSENT_TABLE,
                argv=pre + ["nft", "delete", "table", NFT_FAMILY, NFT_TABLE],
            ),
        ]
    return cmds


def show_argvs(target: ImpairmentTarget) -> list[PlanCommand]:
    pre = enter_argv(target)
    return [
        PlanCommand(
            label=target.label,
            tolerate=ABSENT_DEVICE,
            argv=pre + ["tc", "qdisc", "show", "dev", target.interface],
        ),
        PlanCommand(
            label=target.label,
            tolerate=ABSENT_TABLE,
            argv=pre + ["nft", "list", "table", NFT_FAMILY, NFT_TABLE],
        ),
    ]


def check_argvs(target: ImpairmentTarget) -> list[PlanCommand]:
    """Preflight: the namespace can be entered and the interface exists (changes nothing)."""
    pre = enter_argv(target)
    return [PlanCommand(label=target.label, argv=pre + ["ip", "link", "show", "dev", target.interface])]


def netem_probe_argv() -> list[str]:
    """Adds netem to the loopback of a throwaway namespace that vanishes when the command ends."""
    return ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]


def validate_targets(imp: Impairment, targets: Sequence[ImpairmentTarget]) -> None:
    """Refuse target sets that would collide or leave part of the profile unapplied."""
    seen: set[tuple[str, str | None, str, Hook]] = set()
    for t in targets:
        key = (t.host, t.netns_path, t.interface, t.hook)
        if key in seen:
            raise TestbedError(
                f"two impairment targets share {t.hook} {t.interface} on {t.host} "
                f"({t.netns_path or 'host namespace'})"
            )
        seen.add(key)
    if imp.is_noop:
        return
    for direction in (Direction.PUBLISHER_TO_BROKER, Direction.BROKER_TO_SUBSCRIBER):
        if not imp.direction.covers(direction):
            continue
        ours = [t for t in targets if t.direction is direction]
        needs_egress = uses_netem(imp) or imp.rate_kbit is not None
        needs_ingress = not uses_netem(imp) and imp.loss_pct > 0
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


def build_plan(imp: Impairment, targets: Sequence[ImpairmentTarget]) -> dict[str, Any]:
    """Extra vars for the playbooks: per inventory host, the argv lists of each step."""
    validate_targets(imp, targets)
    hosts: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for t in targets:
        h = hosts.setdefault(t.host, {"check": [], "clear": [], "apply": [], "show": []})
        h["check"] += [c.model_dump() for c in check_argvs(t)]
        h["clear"] += [c.model_dump() for c in clear_argvs(t)]
        h["show"] += [c.model_dump() for c in show_argvs(t)]
        h["apply"] += [PlanCommand(label=t.label, argv=a).model_dump() for a in apply_argvs(imp, t)]
    return {
        "testbed_hosts": ",".join(sorted(hosts)),
        "testbed_profile": imp.name,
        "testbed_needs_netem": imp.needs_netem,
        "testbed_netem_probe": netem_probe_argv(),
        "testbed_netem_missing": f"{NETEM_MISSING}: profile {imp.name} needs delay/jitter/correlated loss "
        f"and tc cannot add a netem qdisc (load or install the {NETEM_MODULE} "
        "kernel module); nothing was applied",
        "testbed_plan": hosts,
    }


# ----------------------------------------------------------------------------- state parsing


def dropped_packets(state: str) -> int | None:
    """Packets our nft drop rules dropped, summed over the state text of `show`; None without rules."""
    counts = [int(n) for n in re.findall(r"counter packets (\d+) bytes \d+ drop", state)]
    return sum(counts) if counts else None


def state_has_ours(state: str) -> bool:
    """True when a show() text still lists one of our qdiscs or the nft table."""
    for line in state.splitlines():
        if line.startswith("qdisc ") and any(f" {h} " in f"{line} " for h in OUR_HANDLES):
            return True
        if line.startswith(f"table {NFT_FAMILY} {NFT_TABLE}"):
            return True
    return False


# ----------------------------------------------------------------------------- ansible-runner


def local_inventory() -> dict[str, Any]:
    return {
        "all": {
            "hosts": {
                LOCALHOST: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
            }
        }
    }


def _ansible_env() -> dict[str, str]:
    path = os.environ.get("PATH", "")
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in path.split(os.pathsep):
        path = venv_bin + os.pathsep + path
    return {
        "PATH": path,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "ANSIBLE_PIPELINING": "1",
    }


class PlaybookResult(BaseModel):
    """What we read from ansible-runner's artifacts: status, rc and the per-item task events."""

    model_config = ConfigDict(extra="forbid")

    playbook: str
    status: str
    rc: int
    items: list[dict[str, Any]]
    failures: list[str]


def _event_items(events: Iterator[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    items: list[dict[str, Any]] = []
    failures: list[str] = []
    for ev in events:
        kind = ev.get("event", "")
        data = ev.get("event_data", {})
        res = data.get("res", {}) or {}
        if kind in ("runner_item_on_ok", "runner_item_on_failed"):
            items.append(
                {
                    "host": data.get("host"),
                    "task": data.get("task"),
                    "failed": kind.endswith("failed"),
                    "item": res.get("item", {}),
                    "rc": res.get("rc"),
                    "stdout": res.get("stdout", ""),
                    "stderr": res.get("stderr", ""),
                }
            )
        if kind in ("runner_on_failed", "runner_item_on_failed", "runner_on_unreachable"):
            if kind == "runner_on_failed" and "results" in res:
                continue  # the loop's summary; its items were reported one by one
            msg = res.get("msg") or ""
            cmd = " ".join(res.get("cmd") or []) if isinstance(res.get("cmd"), list) else res.get("cmd", "")
            stderr = (res.get("stderr") or "").strip()
            failures.append(
                " | ".join(p for p in (f"{data.get('host')}: {data.get('task')}", cmd, stderr or msg) if p)
            )
    return items, failures


def run_playbook(
    playbook: str,
    extravars: Mapping[str, Any],
    *,
    inventory: Path | Mapping[str, Any] | None = None,
    cancellable: bool = True,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` through ansible-runner and read its artifacts (never stdout).

    Ctrl-C (SIGINT) during the run cancels it when ``cancellable`` (else the run finishes) and is
    then delivered again to the caller's handler, so a KeyboardInterrupt still reaches the caller.
    We pass our own cancel callback: otherwise ansible-runner installs SIGINT/SIGTERM handlers that
    it never removes and later Ctrl-C presses would be swallowed.
    """
    import ansible_runner  # backends only: model/ must not import it

    if not (PLAYBOOK_DIR / playbook).is_file():
        raise TestbedError(
            f"playbook not found: {PLAYBOOK_DIR / playbook}",
            hint="run the testbed from its source checkout (pip install -e .)",
        )

    inv: Any = str(inventory) if isinstance(inventory, Path) else (inventory or local_inventory())
    pending: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum)) if main else None
    try:
        with tempfile.TemporaryDirectory(prefix="testbed-ansible-") as private:
            runner = ansible_runner.run(
                private_data_dir=private,
                playbook=str(PLAYBOOK_DIR / playbook),
                inventory=inv,
                extravars=dict(extravars),
                quiet=True,
                envvars=_ansible_env(),
                cancel_callback=(lambda: bool(pending)) if cancellable else (lambda: False),
            )
            items, failures = _event_items(iter(runner.events))
            status, rc = str(runner.status), int(runner.rc if runner.rc is not None else -1)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if pending:
        signal.raise_signal(signal.SIGINT)
    return PlaybookResult(playbook=playbook, status=status, rc=rc, items=items, failures=failures)


def _raise_failed(result: PlaybookResult, what: str) -> None:
    if result.status == "successful" and result.rc == 0:
        return
    netem = [f for f in result.failures if NETEM_MISSING in f]
    message = f"{what} failed (ansible-runner status {result.status}, rc {result.rc})"
    if netem:
        message = netem[0].split(" | ")[-1]
    raise TestbedError(
        message,
        evidence="\n".join(result.failures[-10:]) or None,
        hint=None if netem else "run the playbook by hand with -vvv to see more (docs/impairment.md)",
    )


def _render_state(result: PlaybookResult, task_name: str) -> str:
    blocks: list[str] = []
    for it in result.items:
        if it["task"] != task_name:
            continue
        argv = it["item"].get("argv", [])
        head = f"$ [{it['host']}] {' '.join(argv)}"
        if it["rc"] == 0:
            body = (it["stdout"] or "").rstrip() or "(empty)"
        else:
            last = ((it["stderr"] or "").strip().splitlines() or ["no output"])[0]
            body = f"(absent: {last.strip()})"
        blocks.append(f"{head}\n{body}")
    return "\n".join(blocks) + ("\n" if blocks else "")


# ----------------------------------------------------------------------------- public API


def netem_available() -> bool:
    """Probe this host's kernel: can tc add a netem qdisc in a throwaway namespace?"""
    if which("unshare") is None or which("tc") is None:
        return False
    return run(netem_probe_argv(), check=False, timeout=20).returncode == 0


def check_supported(impairment: Impairment) -> None:
    """Raise TestbedError, before anything starts, when this host cannot apply ``impairment``."""
    if impairment.is_noop:
        return
    needed = ["tc", "nsenter", "ip"] + (["nft"] if impairment.loss_pct and not impairment.needs_netem else [])
    missing = [p for p in needed if which(p) is None]
    if missing:
        raise TestbedError(
            f"impairment {impairment.name} needs {', '.join(missing)} on this host",
            hint="apt-get install iproute2 nftables util-linux",
        )
    if os.geteuid() != 0:
        raise TestbedError(
            f"impairment {impairment.name} needs root to enter network namespaces",
            hint="run as root (sudo) or choose --impairment none",
        )
    if impairment.needs_netem and not netem_available():
        raise TestbedError(
            f"{NETEM_MISSING}: profile {impairment.name} needs delay/jitter/correlated loss, "
            f"but tc cannot add a netem qdisc on this kernel (missing kernel module {NETEM_MODULE})",
            hint="`modprobe sch_netem` (on some distributions it ships in linux-modules-extra-$(uname -r)); "
            "loss-only and rate-only profiles (lossy-*, narrowband-*) work without it",
        )


def _apply_run(
    impairment: Impairment, targets: Sequence[ImpairmentTarget], inventory: Path | None
) -> tuple[str, str]:
    plan = build_plan(impairment, targets)
    result = run_playbook("impair.yml", plan, inventory=inventory)
    _raise_failed(result, f"applying impairment {impairment.name}")
    return _render_state(result, "show state before"), _render_state(result, "show state after")


def apply(
    impairment: Impairment, targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None
) -> str:
    """Clear leftovers of ours, apply ``impairment`` and return the state afterwards."""
    if inventory is None:
        check_supported(impairment)
    return _apply_run(impairment, targets, inventory)[1]


def clear(targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None) -> None:
    """Remove our qdiscs and nft table from every target; safe when nothing is there."""
    _clear_run(targets, inventory)


def _clear_run(targets: Sequence[ImpairmentTarget], inventory: Path | None) -> tuple[str, str]:
    """Clear; the state (before, after) clearing."""
    if not targets:
        return "", ""
    plan = build_plan(_NONE, targets)
    result = run_playbook("clear.yml", plan, inventory=inventory, cancellable=False)
    _raise_failed(result, "clearing impairment")
    state = _render_state(result, "show state after clear")
    if state_has_ours(state):
        raise TestbedError("impairment still present after clear", evidence=state)
    return _render_state(result, "show state before clear"), state


def show(targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None) -> str:
    """``tc qdisc show`` and ``nft list table inet testbed_impair`` per target, as text."""
    if not targets:
        return ""
    result = run_playbook("show.yml", build_plan(_NONE, targets), inventory=inventory)
    _raise_failed(result, "showing impairment state")
    return _render_state(result, "show state")


_NONE = Impairment(name="none")


@contextmanager
def impaired(
    impairment: Impairment, targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None
) -> Iterator[ImpairmentRecord]:
    """Apply ``impairment`` for the duration of the block; ALWAYS clear afterwards (also on Ctrl-C)."""
    if inventory is None:
        check_supported(impairment)
    build_plan(impairment, targets)  # bad targets fail before anything is touched
    record: ImpairmentRecord | None = None
    try:
        before, after = _apply_run(impairment, targets, inventory)
        record = ImpairmentRecord(impairment=impairment, targets=list(targets), before=before, after=after)
        yield record
    finally:
        with sigint_deferred():
            before_clear, state = _clear_run(targets, inventory)
        if record is not None:
            record.before_clear = before_clear
            record.after_clear = state


# ----------------------------------------------------------------------------- docker + inventory helpers


def _container_pid(container: str) -> int:
    out = run(
        ["docker", "inspect", "-f", "{{.State.Pid}}", container],
        timeout=30,
        hint="is the testbed up? (`testbed up`)",
    ).stdout.strip()
    if not out.isdigit() or int(out) == 0:
        raise TestbedError(f"container {container} is not running (docker inspect gave pid {out!r})")
    return int(out)


def _container_ip(container: str) -> str:
    out = run(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", container],
        timeout=30,
    ).stdout.split()
    if not out:
        raise TestbedError(f"container {container} has no IP address on a Docker network")
    return out[0]


def targets_for_containers(direction: Direction, containers: Mapping[str, str],
                           interface: str = "eth0") -> list[ImpairmentTarget]:
    """Targets for the testbed's containers on this Docker host.

    ``containers`` maps ``publisher``, ``broker`` and ``subscriber`` to container names. Delay,
    jitter and rate act on the sender's egress (the broker's limited to packets towards the
    subscriber). Loss acts at the RECEIVER's ingress, inside its namespace, filtered on the
    sender's address: the broker-side capture then sees every original segment and its
    retransmission, so the measured retransmission rate is the injected loss.
    """
    def netns(role: str) -> str:
        return f"/proc/{_container_pid(containers[role])}/ns/net"

    def ip(role: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        return ipaddress.ip_address(_container_ip(containers[role]))

    targets: list[ImpairmentTarget] = []
    try:
        if direction.covers(Direction.PUBLISHER_TO_BROKER):
            targets.append(ImpairmentTarget(label="publisher", netns_path=netns("publisher"), interface=interface))
            targets.append(ImpairmentTarget(label="publisher", netns_path=netns("broker"), interface=interface,
                                            hook=Hook.INGRESS, source_ip=ip("publisher")))
        if direction.covers(Direction.BROKER_TO_SUBSCRIBER):
            targets.append(ImpairmentTarget(label="broker", netns_path=netns("broker"), interface=interface,
                                            peer_ip=ip("subscriber")))
            targets.append(ImpairmentTarget(label="broker", netns_path=netns("subscriber"), interface=interface,
                                            hook=Hook.INGRESS, source_ip=ip("broker")))
    except KeyError as exc:
        raise TestbedError(f"impairment {direction}: container for {exc.args[0]} not given") from None
    except ValidationError as exc:
        raise TestbedError(f"impairment target: {exc.errors()[0]['msg']}") from exc
    return targets


class LabInventory(BaseModel):
    """The groups a multi-host lab needs, read from ``ansible-inventory --list``."""

    model_config = ConfigDict(extra="forbid")

    source: str
    broker: list[str]
    router: list[str]
    publisher: list[str]
    hostvars: dict[str, dict[str, Any]]


REQUIRED_GROUPS = ("broker", "router", "publisher")


def parse_inventory_listing(listing: Mapping[str, Any], source: str) -> LabInventory:
    """Validate ``ansible-inventory --list`` JSON: the three groups exist and router hosts say where."""
    hostvars = dict(listing.get("_meta", {}).get("hostvars", {}))

    def hosts_of(group: str, seen: frozenset[str] = frozenset()) -> list[str]:
        entry = listing.get(group) or {}
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            if child not in seen:
                found += hosts_of(child, seen | {group})
        return sorted(set(found))

    groups = {g: hosts_of(g) for g in REQUIRED_GROUPS}
    missing = [g for g, hosts in groups.items() if not hosts]
    if missing:
        raise TestbedError(
            f"{source}: inventory lacks host(s) in group(s) {', '.join(missing)}",
            hint="a lab inventory needs groups broker, router and publisher; "
            "see playbooks/inventory.example.yml and docs/multi-host.md",
        )
    problems = []
    for host in groups["router"]:
        hv = hostvars.get(host, {})
        if not hv.get("impair_egress_interface") and not hv.get("impair_ingress_interface"):
            problems.append(
                f"{host}: impair_egress_interface or impair_ingress_interface: missing (the router "
                "interface facing the broker, and the one facing the ESP32)"
            )
        for key in ("impair_egress_interface", "impair_ingress_interface"):
            value = hv.get(key)
            if value is not None and not isinstance(value, str):
                problems.append(f"{host}: {key}: must be an interface name")
        if hv.get("impair_peer_ip") is not None:
            try:
                ipaddress.ip_address(str(hv["impair_peer_ip"]))
            except ValueError:
                problems.append(f"{host}: impair_peer_ip: not an IP address ({hv['impair_peer_ip']!r})")
    if problems:
        raise TestbedError(f"{source}: invalid lab inventory", evidence="\n".join(problems))
    return LabInventory(source=source, hostvars=hostvars, **groups)


def load_inventory(path: Path) -> LabInventory:
    """Read an inventory (INI or YAML) through ``ansible-inventory --list`` and validate it."""
    if not path.is_file():
        raise TestbedError(f"inventory file not found: {path}")
    tool = str(Path(sys.executable).parent / "ansible-inventory")
    argv = [tool if Path(tool).exists() else "ansible-inventory", "-i", str(path), "--list"]
    proc = run(argv, check=False, timeout=60, env={"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"})
    if proc.returncode != 0:
        raise TestbedError(f"{path}: ansible-inventory cannot parse it", evidence=proc.stderr.strip()[-2000:])
    return parse_inventory_listing(json.loads(proc.stdout), str(path))


def targets_for_router(lab: LabInventory) -> list[ImpairmentTarget]:
    """Targets on the router hosts: their own interfaces in the host namespace (no netns)."""
    targets: list[ImpairmentTarget] = []
    for host in lab.router:
        hv = lab.hostvars.get(host, {})
        peer = ipaddress.ip_address(str(hv["impair_peer_ip"])) if hv.get("impair_peer_ip") else None
        if hv.get("impair_egress_interface"):
            targets.append(
                ImpairmentTarget(
                    label="publisher", host=host, interface=hv["impair_egress_interface"], peer_ip=peer
                )
            )
        if hv.get("impair_ingress_interface"):
            targets.append(
                ImpairmentTarget(
                    label="publisher",
                    host=host,
                    interface=hv["impair_ingress_interface"],
                    peer_ip=peer,
                    hook=Hook.INGRESS,
                )
            )
    return targets


# ----------------------------------------------------------------------------- by-hand plans


def _parse_target(text: str) -> ImpairmentTarget:
    """``label=NETNS:IFACE[:hook][@peer]``, NETNS a path or ``host``."""
    try:
        label, rest = text.split("=", 1)
        peer = None
        if "@" in rest:
            rest, peer = rest.rsplit("@", 1)
        parts = rest.split(":")
        netns, iface = parts[0], parts[1]
        hook = parts[2] if len(parts) > 2 else "egress"
        return ImpairmentTarget(
            label=label,
            netns_path=None if netns == "host" else netns,
            interface=iface,
            hook=Hook(hook),
            peer_ip=ipaddress.ip_address(peer) if peer else None,
        )
    except (ValueError, IndexError, ValidationError) as exc:
        raise TestbedError(
            f"--target {text!r}: expected label=NETNS:IFACE[:egress|ingress][@PEER_IP] ({exc})"
        ) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m orchestrator.backends.impairment plan PROFILE --target ...``: by-hand extra vars."""
    parser = argparse.ArgumentParser(prog="python -m orchestrator.backends.impairment")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print the playbooks' extra vars (YAML) for a profile and targets")
    p.add_argument("profile")
    p.add_argument(
        "--target",
        action="append",
        required=True,
        help="label=NETNS:IFACE[:egress|ingress][@PEER_IP]; NETNS a path or 'host'",
    )
    args = parser.parse_args(argv)
    try:
        imp = load_impairment(args.profile)
        plan = build_plan(imp, [_parse_target(t) for t in args.target])
    except TestbedError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        for extra in (exc.evidence, exc.hint):
            if extra:
                print(extra, file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump(plan, sort_keys=False, width=1000, default_flow_style=None))
    return 0

