"""Which mechanism made each impaired cell's delay and jitter, and what that means for its numbers.

Read from the cell's ``impairment_state`` (its run folder's impairment.json, copied into cell.json):
``delay_mechanism`` is "netem", "queue" or null (the profile has no delay, jitter or correlated
loss). The section appears only when a cell of the bundle recorded the key, so the report of a bundle
made before it existed is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.model.axes import NO_IMPAIRMENT
from orchestrator.report.document import Block, Heading, Paragraph, Table
from orchestrator.report.loader import Cell
from orchestrator.report.values import NA

KEY = "delay_mechanism"
NO_MECHANISM = "-"  # recorded as null: nothing in the profile needs one
COLUMNS = ("cell", "status", "impairment", "profile", "delay mechanism")

ABOUT = (
    "Delay mechanism: what made the profile's delay, jitter and correlated loss, as recorded in each run "
    "folder's impairment.json (delay_mechanism; chosen with --delay-mechanism, auto: netem where the "
    "kernel has it, else the queue). '-': the profile has none of them (loss alone is an nftables drop "
    "at the receiver's ingress, a rate limit a tbf qdisc at the sender's egress); n/a: not recorded."
)
NETEM = (
    "netem: the kernel's netem qdisc on the egress of the sender's interface (publisher->broker: the "
    "publisher container's eth0; broker->subscriber: the broker's, towards the subscriber only)."
)
QUEUE = (
    "queue: the userspace delay line (NFQUEUE) at a forwarding hop. A router container (router) "
    "carries the publisher->broker link; the line holds each packet at the router's FORWARD hook for "
    "the profile's delay and jitter, and the profile's loss is dropped at the broker's ingress, after "
    "the broker-side capture has seen the packet. The hop adds its own forwarding time, which cells "
    "without the router do not have (the line's floor is measured by bench/impairment.py); the line's "
    "parameters and counters are under delay_line in the run folder's impairment.json."
)


def recorded(state: Mapping[str, Any] | None) -> bool:
    """Did the run record which delay mechanism it used?"""
    return isinstance(state, Mapping) and KEY in state


def mechanism_label(state: Mapping[str, Any] | None) -> str:
    """netem / queue as recorded; '-' when recorded as null or nothing was applied; n/a when unknown."""
    if not isinstance(state, Mapping):
        return NA
    if KEY in state:
        value = state[KEY]
        return NO_MECHANISM if value is None else str(value)
    return NO_MECHANISM if state.get("applied") is False else NA


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def profile_text(state: Mapping[str, Any] | None) -> str:
    """The applied profile in a few words, e.g. '5 ms +/- 2 ms (normal), 0.1 % loss'."""
    profile = state.get("impairment") if isinstance(state, Mapping) else None
    if not isinstance(profile, Mapping):
        return "nothing applied" if isinstance(state, Mapping) and state.get("applied") is False else NA
    parts = []
    if profile.get("delay_ms") or profile.get("jitter_ms"):
        jitter = profile.get("jitter_ms")
        spread = f" +/- {_g(jitter)} ms ({profile.get('distribution', 'uniform')})" if jitter else ""
        parts.append(f"{_g(profile.get('delay_ms', 0))} ms{spread}")
    if profile.get("loss_pct"):
        corr = profile.get("loss_correlation_pct")
        parts.append(f"{_g(profile['loss_pct'])} % loss" + (f" ({_g(corr)} % correlation)" if corr else ""))
    if profile.get("rate_kbit"):
        parts.append(f"{_g(profile['rate_kbit'])} kbit/s")
    if profile.get("direction") not in (None, "publisher->broker"):
        parts.append(str(profile["direction"]))
    return ", ".join(parts) or "nothing"


def impairment_section(cells: Sequence[Cell]) -> list[Block]:
    """Every impaired cell with its delay mechanism, and what each mechanism is; nothing for a bundle
    whose cells did not record the mechanism."""
    if not any(recorded(c.record.impairment_state) for c in cells):
        return []
    impaired = [c for c in cells if c.record.impairment != NO_IMPAIRMENT]
    if not impaired:
        return []
    rows = tuple((c.record.cell_id, c.record.status, c.record.impairment, profile_text(c.record.impairment_state),
                  mechanism_label(c.record.impairment_state)) for c in impaired)
    used = {row[-1] for row in rows}
    text = [ABOUT] + ([NETEM] if "netem" in used else []) + ([QUEUE] if "queue" in used else [])
    return [Heading(2, "Impairment"), Table(COLUMNS, rows, "Impaired cells and what made their delay"),
            *(Paragraph(t) for t in text)]
