"""Can this host apply a profile? The tools, root, and the kernel's netem, checked before anything starts."""

from __future__ import annotations

import os

from orchestrator.backends.impairment.argv import NETEM_MISSING, NETEM_MODULE, netem_probe_argv
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Impairment


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
