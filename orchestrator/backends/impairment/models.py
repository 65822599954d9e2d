"""The impairment backend's data: where traffic is impaired, the commands for it, what was applied."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, IPvAnyAddress, IPvAnyNetwork, field_validator, model_validator

from orchestrator.model.impairment import Direction, Impairment

LOCALHOST = "localhost"
HELPER_SUFFIX = "-netadmin"
CONTAINER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,120}$"
ROLE_DIRECTION = {"publisher": Direction.PUBLISHER_TO_BROKER, "broker": Direction.BROKER_TO_SUBSCRIBER}


class Hook(StrEnum):
    EGRESS = "egress"
    INGRESS = "ingress"
    FORWARD = "forward"  # a router's forwarding path: the userspace delay line (queue.py)


class ImpairmentTarget(BaseModel):
    """One place traffic is impaired: an interface in a network namespace on an inventory host.

    ``label`` is the sending side of the direction: ``publisher`` (publisher->broker traffic) or
    ``broker`` (broker->subscriber traffic, with ``peer_ip`` = the subscriber's address so the
    broker's other traffic is untouched).

    Where the commands run: ``container`` names a container on this Docker host, and they run in a helper
    container sharing its network namespace (``helper``, started by helpers.py; no root, no host view
    of namespaces needed); else ``netns_path`` is entered with nsenter on the inventory host (a lab
    router); neither means the host's own namespace.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    netns_path: str | None = None
    container: str | None = Field(default=None, pattern=CONTAINER_NAME)
    interface: str = Field(pattern=r"^[A-Za-z0-9_.:@-]{1,15}$")
    peer_ip: IPvAnyAddress | None = None
    source_ip: IPvAnyAddress | None = None  # ingress: only packets from this sender are dropped
    source_outside: IPvAnyNetwork | None = None  # ingress: only packets from outside this network (a board's)
    delays: bool = False  # an ingress line that also delays: a board's path crosses no hop of ours
    hook: Hook = Hook.EGRESS
    line: bool = False  # the userspace delay line may run here (queue mechanism; always for FORWARD)
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

    @model_validator(mode="after")
    def _one_place(self) -> ImpairmentTarget:
        if self.delays and not (self.line and self.hook is Hook.INGRESS):
            raise ValueError("delays: only for an ingress target with the delay line (line)")
        if (self.hook is Hook.FORWARD or self.line) and self.container is None:
            raise ValueError("the userspace delay line runs in a container target's helper (give container)")
        if self.container is not None and (self.netns_path is not None or self.host != LOCALHOST):
            raise ValueError("a container target runs on this Docker host, in the container's own namespace "
                             "(give container, or host and netns_path, not both)")
        return self

    @property
    def direction(self) -> Direction:
        return ROLE_DIRECTION[self.label]

    @property
    def helper(self) -> str | None:
        """The helper container whose namespace is the target's (container targets only)."""
        return helper_name(self.container) if self.container else None

    @property
    def namespace(self) -> str | None:
        """What identifies the target's network namespace: the container, the netns path, None (host)."""
        return f"container:{self.container}" if self.container else self.netns_path

    def describe(self) -> str:
        where = f"container {self.container}" if self.container else self.netns_path or "host namespace"
        peer = f", peer {self.peer_ip}" if self.peer_ip else ""
        peer += f", from {self.source_ip}" if self.source_ip else ""
        peer += f", from outside {self.source_outside}" if self.source_outside else ""
        return f"{self.label} {self.hook} {self.interface} ({self.host}: {where}{peer})"


def helper_name(container: str) -> str:
    """The name of the helper container that impairs ``container`` (one per impaired container)."""
    return f"{container}{HELPER_SUFFIX}"


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
    delay_mechanism: str | None = None  # netem | queue (the userspace delay line) | None: no delay
    before: str
    after: str
    before_clear: str | None = None  # at the end of the block: nft counters hold the packets dropped
    after_clear: str | None = None
    line_problem: str | None = None  # queue mechanism: what went wrong with a delay line (fails the cell)
