"""Can this Docker host apply a profile? The helper image, and what the kernel the containers run on can
do (netem, nftables), probed in a throwaway helper container, before anything starts. Nothing runs on
the host itself: no root, no `unshare`, and it answers for Docker Desktop's VM kernel too."""

from __future__ import annotations

import json
import os
from functools import lru_cache

from orchestrator.backends.docker import inspect_image
from orchestrator.backends.impairment import queue
from orchestrator.backends.impairment.argv import (
    HELPER_IMAGE,
    NETEM_MISSING,
    NETEM_MODULE,
    helper_probe_argv,
    netem_probe_argv,
)
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Direction, Impairment, Order

NFT_PROBE = ("add", "table", "inet", "testbed_probe")
HELPER_HINT = "testbed images build"


def _probe(argv: list[str]) -> tuple[bool, str]:
    proc = run(argv, check=False, timeout=60)
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()


def helper_ready() -> None:
    """TestbedError unless the docker CLI exists and the helper image is built."""
    if which("docker") is None:
        raise TestbedError("impairment needs the docker CLI on this host", hint="install Docker")
    if inspect_image(HELPER_IMAGE) is None:
        raise TestbedError(f"the impairment helper image {HELPER_IMAGE} is not built", hint=HELPER_HINT)


@lru_cache(maxsize=1)
def netem_probe() -> tuple[bool, str]:
    """(can a helper add a netem qdisc, what tc said); the kernel does not change while we run."""
    helper_ready()
    return _probe(netem_probe_argv())


def netem_available() -> bool:
    """Can tc add a netem qdisc in a throwaway helper container's namespace?"""
    try:
        return netem_probe()[0]
    except TestbedError:
        return False


@lru_cache(maxsize=1)
def nft_probe() -> tuple[bool, str]:
    """(can a helper create an nftables table, what nft said)."""
    helper_ready()
    return _probe(helper_probe_argv("nft", *NFT_PROBE))


def resolve_mechanism(impairment: Impairment, requested: str = "auto") -> str | None:
    """What makes the profile's delay, jitter and correlated loss: ``netem`` or ``queue`` (the userspace
    delay line at a forwarding hop); None when the profile has none of them (loss-only and rate-only
    profiles use nft and tbf whatever was asked). ``auto``: netem where the kernel has it, else the queue;
    always the queue for ``order: fifo`` under jitter, which netem cannot keep."""
    if not impairment.needs_netem:
        return None
    if requested == "auto":
        fifo = impairment.order is Order.FIFO and impairment.jitter_ms > 0
        return "netem" if netem_available() and not fifo else "queue"
    if requested not in ("netem", "queue"):
        raise TestbedError(f"unknown delay mechanism {requested!r}: auto, netem or queue")
    return requested


def check_supported(impairment: Impairment, *, in_containers: bool = True, mechanism: str = "auto") -> None:
    """Raise TestbedError, before anything starts, when this Docker host cannot apply ``impairment`` to
    containers (``in_containers=False``: to namespaces of this host, entered with nsenter as root)."""
    if impairment.is_noop:
        return
    if not in_containers:
        check_host(impairment)
        return
    helper_ready()
    if impairment.loss_pct and not impairment.needs_netem:
        ok, said = nft_probe()
        if not ok:
            raise TestbedError(f"impairment {impairment.name} needs nftables, but a helper container cannot "
                               f"create a table: {said}", hint="a kernel with nf_tables (CONFIG_NF_TABLES)")
    resolved = resolve_mechanism(impairment, mechanism)
    if resolved == "queue" and impairment.direction.covers(Direction.BROKER_TO_SUBSCRIBER):
        raise TestbedError(f"profile {impairment.name}: the userspace delay line acts on publisher->broker only "
                           f"(its forwarding hop sits on that link), and {impairment.direction} was asked",
                           hint="use a publisher->broker profile, or a kernel with sch_netem (--delay-mechanism netem)")
    if resolved == "netem" and impairment.order is Order.FIFO and impairment.jitter_ms:
        raise TestbedError(f"profile {impairment.name}: order fifo needs the userspace delay line; netem's queue "
                           "releases packets by their send time, so under jitter it reorders them",
                           hint="--delay-mechanism queue, or drop `order: fifo` from the profile")
    if resolved == "netem" and not netem_probe()[0]:
        raise TestbedError(
            f"{NETEM_MISSING}: profile {impairment.name} needs delay/jitter/correlated loss, "
            f"but tc cannot add a netem qdisc on this kernel (missing kernel module {NETEM_MODULE})",
            hint="`--delay-mechanism queue` (or auto) uses the userspace delay line instead; or `modprobe "
            "sch_netem` (on some distributions it ships in linux-modules-extra-$(uname -r))",
        )


def check_host(impairment: Impairment) -> None:
    """Namespaces of this host itself (a lab router reached with a local connection): tools and root."""
    needed = ["tc", "nsenter", "ip"] + (["nft"] if impairment.loss_pct and not impairment.needs_netem else [])
    missing = [p for p in needed if which(p) is None]
    if missing:
        raise TestbedError(f"impairment {impairment.name} needs {', '.join(missing)} on this host",
                           hint="apt-get install iproute2 nftables util-linux")
    if os.geteuid() != 0:
        raise TestbedError(f"impairment {impairment.name} needs root to enter this host's network namespaces",
                           hint="run as root, or impair containers (run/sweep/up) which needs no root")
    if impairment.needs_netem and run(netem_probe_argv(in_helper=False), check=False, timeout=20).returncode:
        raise TestbedError(f"{NETEM_MISSING}: profile {impairment.name} needs netem and this host's kernel "
                           f"lacks {NETEM_MODULE}", hint="`modprobe sch_netem`")


FLOOR_QUEUE = 7359  # the floor probe's own queue, in its own throwaway namespace


def line_floor(count: int = 300) -> dict[str, float]:
    """The delay line's own floor on the engine's kernel, measured now in a throwaway helper: ``count``
    UDP datagrams over its loopback, once directly and once through the line at 0 ms (an NFQUEUE rule
    on OUTPUT); added median and p99 in ms. TestbedError when the probe cannot run."""
    q, stats = FLOOR_QUEUE, "/dev/shm/testbed-floor.json"
    probe_cmd = f"testbed-delayline-floor --port {q} --count {count}"
    script = (f"{queue.LINE} --queue {q} --delay-ms 0 --stats {stats} & "
              f"for i in $(seq 100); do [ -s {stats} ] && break; sleep 0.05; done; "
              f"{probe_cmd} --label direct && "
              f"{queue.IPTABLES} -t mangle -A OUTPUT -o lo -p udp --dport {q} -j NFQUEUE --queue-num {q} && "
              f"{probe_cmd} --label line; rc=$?; kill %1 2>/dev/null; exit $rc")
    proc = run(helper_probe_argv("sh", "-c", script), check=False, timeout=120)
    runs = {}
    for line in proc.stdout.splitlines():
        try:
            got = json.loads(line)
        except ValueError:
            continue
        runs[got.get("label")] = got
    direct, through = runs.get("direct", {}), runs.get("line", {})
    if proc.returncode or not direct.get("received") or not through.get("received"):
        said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise TestbedError(f"the delay line's floor could not be measured: {said}",
                           hint="rebuild the helper image: testbed images build")
    return {"median_ms": (through["median_us"] - direct["median_us"]) / 1000,
            "p99_ms": (through["p99_us"] - direct["p99_us"]) / 1000,
            "received": through["received"], "count": count}
