"""Apply, show and clear network impairments with ansible-runner driving ``playbooks/``.

Where each mechanism goes (see docs/impairment.md for the measurements behind it):

* ``egress`` targets get tc qdiscs: netem (delay, jitter, correlated loss) and tbf (rate). A
  qdisc on the sender's own interface is where a link's delay and bottleneck live.
* ``ingress`` targets get the nftables random drop (loss without netem). It must sit where the
  packets ARRIVE (the host side of the sender's veth, or a router's interface): an nft drop on
  a local sender's egress is reported back to TCP, which silently sends the segment again, so
  no loss happens on the wire (measured: 92 drops, 0 retransmissions).

One module per job:

* ``models``: the targets, the plan's commands, the record of what was applied;
* ``argv``: every tc/nft command line, built by small pure functions (one source of truth);
* ``plan``: the playbooks' extra vars for a profile and its targets, and reading their state text;
* ``driver``: ansible-runner running the playbooks; apply, show, clear and ``impaired``;
* ``probe``: whether this host can apply a profile (tools, root, the kernel's netem);
* ``targets``: targets from the testbed's containers or from a lab inventory;
* ``cli_plan``: ``python -m orchestrator.backends.impairment plan ...``, a plan file by hand.

The playbooks only run the argv lists they receive as extra vars, so they stay usable by hand with
a plan file. Only our own objects are touched: qdisc handles ``7e57:``-``7e59:`` and the nft table
``inet testbed_impair``.
"""

from orchestrator.backends.impairment import router
from orchestrator.backends.impairment.driver import apply, clear, impaired, line_health, show
from orchestrator.backends.impairment.models import Hook, ImpairmentRecord, ImpairmentTarget, PlanCommand
from orchestrator.backends.impairment.plan import dropped_packets, state_has_ours
from orchestrator.backends.impairment.probe import check_supported, netem_available, resolve_mechanism
from orchestrator.backends.impairment.targets import (
    LabInventory,
    load_inventory,
    targets_for_containers,
    targets_for_router,
)

__all__ = [
    "Hook",
    "ImpairmentRecord",
    "ImpairmentTarget",
    "LabInventory",
    "apply",
    "check_supported",
    "clear",
    "dropped_packets",
    "impaired",
    "line_health",
    "load_inventory",
    "netem_available",
    "PlanCommand",
    "resolve_mechanism",
    "router",
    "show",
    "state_has_ours",
    "targets_for_containers",
    "targets_for_router",
]
