"""The impairment backend's data: where traffic is impaired, the commands for it, what was applied."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, IPvAnyAddress, field_validator

from orchestrator.model.impairment import Direction, Impairment

LOCALHOST = "localhost"
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
