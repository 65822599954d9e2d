"""``python -m orchestrator.backends.impairment plan PROFILE --target ...``: the playbooks' extra vars by hand."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Sequence

import yaml
from pydantic import ValidationError

from orchestrator.backends.impairment.models import Hook, ImpairmentTarget
from orchestrator.backends.impairment.plan import build_plan
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import load_impairment


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
