"""Network impairment profiles: what to do to a link, validated, with no outside-world imports.

A profile says how the link is degraded (delay, jitter, loss, rate) and in which direction.
Built-in profiles live as YAML package data in ``orchestrator/impairments/``; users may pass
their own YAML file instead of a name. How a profile is applied is the backend's business
(``orchestrator/backends/impairment/``).
"""

from __future__ import annotations

from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from orchestrator.errors import TestbedError
from orchestrator.model.yamlfile import Finite, describe_validation_error, read_yaml

PROFILE_PACKAGE = "orchestrator.impairments"


DelayMechanism = Literal["auto", "netem", "queue"]
"""How delay and jitter are made: netem (the kernel's qdisc), queue (our userspace delay line through
NFQUEUE, at a forwarding hop), auto (netem where the kernel has it, else the queue)."""
DELAY_MECHANISMS: tuple[str, ...] = ("auto", "netem", "queue")


class Distribution(StrEnum):
    """Jitter distribution (netem's tables; ``uniform`` is netem's default without a table)."""

    NORMAL = "normal"
    PARETO = "pareto"
    PARETONORMAL = "paretonormal"
    UNIFORM = "uniform"


class Order(StrEnum):
    """Packet order under jitter. ``reorder``: each packet leaves when its own delay is up, as netem's
    time-sorted queue does (a packet drawn short overtakes one drawn long). ``fifo``: packets leave in
    arrival order, as on one radio link (a packet drawn long holds back the ones behind it, which
    raises their delay when the interval is short against the jitter); only the delay line has it."""

    REORDER = "reorder"
    FIFO = "fifo"


class Direction(StrEnum):
    """Which traffic is impaired."""

    PUBLISHER_TO_BROKER = "publisher->broker"
    BROKER_TO_SUBSCRIBER = "broker->subscriber"
    BOTH = "both"

    def covers(self, one: Direction) -> bool:
        return self is Direction.BOTH or self is one


def _custom(kind: str, message: str, **ctx: object) -> PydanticCustomError:
    return PydanticCustomError(kind, message, dict(ctx))


class Impairment(Finite):
    """One named network condition (every number finite: a NaN delay would pass the range checks and apply
    nothing)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64)
    description: str = ""
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    distribution: Distribution = Distribution.UNIFORM
    order: Order = Order.REORDER
    loss_pct: float = 0.0
    loss_correlation_pct: float = 0.0
    rate_kbit: int | None = None
    direction: Direction = Direction.PUBLISHER_TO_BROKER

    @field_validator("delay_ms", "jitter_ms")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise _custom("negative", "must not be negative (got {value} ms)", value=value)
        if value > 60_000:
            raise _custom("too_large", "must be at most 60000 ms (got {value} ms)", value=value)
        return value

    @field_validator("jitter_ms")
    @classmethod
    def _jitter_within_delay(cls, value: float, info: ValidationInfo) -> float:
        delay = info.data.get("delay_ms")
        if delay is not None and value > delay:
            raise _custom(
                "jitter_gt_delay",
                "must not exceed delay_ms ({jitter} ms > {delay} ms)",
                jitter=value,
                delay=delay,
            )
        return value

    @field_validator("loss_pct", "loss_correlation_pct")
    @classmethod
    def _percentage(cls, value: float) -> float:
        if not 0 <= value <= 100:
            raise _custom("percentage", "must be a percentage between 0 and 100 (got {value})", value=value)
        if round(value, 2) != value:
            raise _custom(
                "resolution", "at most 2 decimal places (0.01 % resolution, got {value})", value=value
            )
        return value

    @field_validator("loss_correlation_pct")
    @classmethod
    def _correlation_needs_loss(cls, value: float, info: ValidationInfo) -> float:
        if value > 0 and not info.data.get("loss_pct"):
            raise _custom("correlation_without_loss", "needs loss_pct > 0 (got loss_pct 0)")
        return value

    @field_validator("rate_kbit")
    @classmethod
    def _positive_rate(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise _custom(
                "rate", "must be > 0 kbit/s when set (got {value}); omit it for no rate limit", value=value
            )
        if value is not None and value > 100_000_000:
            raise _custom("rate", "must be at most 100000000 kbit/s (got {value})", value=value)
        return value

    @property
    def needs_netem(self) -> bool:
        """Delay, jitter and correlated loss need sch_netem; plain loss (nft) and rate (tbf) do not."""
        return self.delay_ms > 0 or self.jitter_ms > 0 or self.loss_correlation_pct > 0

    @property
    def is_noop(self) -> bool:
        return not (self.delay_ms or self.jitter_ms or self.loss_pct or self.rate_kbit)


def builtin_names() -> list[str]:
    """Names of the profiles shipped as package data."""
    folder = resources.files(PROFILE_PACKAGE)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def _validate(data: object, source: str, lines: dict | None, *, default_name: str) -> Impairment:
    if not isinstance(data, dict):
        raise TestbedError(f"{source}: expected a mapping of impairment keys at the top level")
    data = {"name": default_name, **data}
    try:
        return Impairment.model_validate(data)
    except ValidationError as exc:
        raise TestbedError(
            f"{source}: invalid impairment profile", evidence=describe_validation_error(exc, source, lines)
        ) from exc


def load_impairment(name_or_path: str | Path) -> Impairment:
    """A built-in profile by name, or a user's YAML file by path.

    Raises TestbedError for an unknown name (listing the known ones) or a bad file (naming
    file, line and field).
    """
    text = str(name_or_path)
    known = builtin_names()
    if text in known:
        resource = resources.files(PROFILE_PACKAGE) / f"{text}.yaml"
        with resources.as_file(resource) as path:
            data, lines = read_yaml(Path(path))
            return _validate(data, f"built-in profile {text} ({path.name})", lines, default_name=text)
    path = Path(text).expanduser()
    looks_like_file = path.suffix in {".yaml", ".yml"} or "/" in text
    if not looks_like_file:
        raise TestbedError(
            f"unknown impairment profile: {text!r}",
            hint="known profiles: " + ", ".join(known) + "; or give the path of a YAML file",
        )
    if not path.is_file():
        raise TestbedError(
            f"impairment profile file not found: {path}", hint="known profiles: " + ", ".join(known)
        )
    data, lines = read_yaml(path)
    return _validate(data, str(path), lines, default_name=_file_stem_name(path))


def _file_stem_name(path: Path) -> str:
    stem = path.stem.lower()
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem).lstrip("._-")
    return cleaned or "custom"
