"""One start for a fleet across publisher hosts (docs/multi-host.md, "One start").

The start instant is chosen on the broker host's clock: the broker host's latest stamp of the clock exchanges
before the cell (t3 of the last answered exchange, on its clock), plus the controller's time since those stamps
came back, plus a lead (START_LEAD_S, lab/remote.py) that covers starting the publish play on every host. Each host
gets it on its own clock by its own estimate before the cell (analysis/clock.py: lab = host + offset, so
host = lab - offset), as ``--start-at-us`` of its fleet: device i's slot is then start + i / connect_rate on the
common timeline whichever host runs it. The mapping's error is the host's bound before the cell plus the drift
the bound allows over the lead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.analysis import clock
from orchestrator.errors import TestbedError
from orchestrator.model import shares


@dataclass(frozen=True)
class HostStart:
    host: str
    start_at_us: int  # on the host's own clock
    offset_us: float  # broker host's clock minus this host's, before the cell
    bound_us: float  # the mapping's error bound


@dataclass(frozen=True)
class StartPlan:
    broker_us: int  # the start on the broker host's clock
    hosts: dict[str, HostStart]

    def as_dict(self) -> dict[str, Any]:
        return {"broker_us": self.broker_us, "reference": "the broker host's clock (epoch microseconds)",
                "hosts": {h: {"start_at_us": s.start_at_us, "offset_us": s.offset_us, "bound_us": s.bound_us}
                          for h, s in self.hosts.items()}}


def samples(text: str) -> list[clock.TimeSample]:
    """clock_probe.py's CSV lines (t1_us,t2_us,t3_us,t4_us; the header and anything else skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if len(parts) == 4 and all(p.lstrip("-").isdigit() for p in parts):
            out.append(clock.TimeSample(*(int(p) for p in parts)))
    return out


def plan_start(stamps: dict[str, str], since_stamps_s: float, lead_s: float) -> StartPlan:
    """``stamps``: host -> its exchanges before the cell (clock_probe.py's CSV); ``since_stamps_s``: the
    controller's time since they came back. A host without an estimate cannot be given the start: TestbedError
    naming it."""
    estimates: dict[str, clock.PhaseEstimate] = {}
    latest = 0
    for host, text in stamps.items():
        got = samples(text)
        try:
            estimates[host] = clock.estimate_phase(got, "pre")
        except clock.ClockSyncError as exc:
            raise TestbedError(f"{host}: no clock estimate before the cell ({exc.message}): its share's start "
                               "cannot be put on the common timeline",
                               hint="the time echo on the broker host must answer every publisher host (UDP)") \
                from None
        latest = max(latest, max(s.t3_us for s in got))
    start = int(latest + (since_stamps_s + lead_s) * 1e6)
    hosts = {}
    for host, est in estimates.items():
        allowance = clock.MAX_DRIFT_PPM * 1e-6 * max(0.0, start - est.at_board_us - est.offset_us)
        hosts[host] = HostStart(host=host, start_at_us=int(round(start - est.offset_us)), offset_us=est.offset_us,
                                bound_us=est.bound_us + allowance)
    return StartPlan(broker_us=start, hosts=hosts)


STAMPS_TASK = "The clock stamps before the cell"  # playbooks/tasks/lab_up.yml


def apply_start(outputs: dict[str, dict[str, dict[str, Any]]], labvars: dict[str, Any], since_stamps_s: float,
                lead_s: float) -> StartPlan:
    """The start of a fleet over several publisher hosts, from the ``up`` play's outputs (each host's stamps),
    put on each host's command line in ``labvars`` (lab/remote.py cell_vars)."""
    lab = labvars["testbed_lab"]
    stamps = {h: str(outputs.get(h, {}).get(STAMPS_TASK, {}).get("stdout") or "") for h in lab["publishers"]}
    plan = plan_start(stamps, since_stamps_s, lead_s)
    for host, start in plan.hosts.items():
        lab["publisher_argv"][host] = [*lab["publisher_argv"][host], "--start-at-us", str(start.start_at_us)]
    return plan


def start_record(plan: StartPlan, *, devices: int, connect_rate: float, weights: list[int], hosts: list[str],
                 addresses: dict[str, str]) -> dict[str, Any]:
    """logs/fleet_start.json: the plan, each host's first device and the address its packets leave from (what
    analysis/fleetstart.py finds its first SYN by)."""
    dealt = shares.deal(devices, weights)
    firsts = [dealt.index(k) if k in dealt else None for k in range(len(weights))]
    return {**plan.as_dict(), "connect_rate": connect_rate, "devices": devices, "weights": weights,
            "first_device": dict(zip(hosts, firsts, strict=True)), "addresses": addresses}
