"""Events on a cell's timeline (issue 27 part 2): what happens to the broker or the devices' links mid-run, when.

``--events broker-restart@20s,link-down@30s:5s``: each event's kind, its time from the publisher's go and (link-down)
how long it lasts. The cell runs them (orchestrator/measure/events.py) and records each as it happened in cell.json
``events``: asked, started and ended (epoch seconds, the capture's clock), and any error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

KINDS = ("broker-restart", "broker-kill", "link-down")
_TIME = r"[0-9]+(?:\.[0-9]+)?(?:ms|s)?"
_EVENT = re.compile(rf"^(?P<kind>[a-z-]+)@(?P<at>{_TIME})(?::(?P<duration>{_TIME}))?$")


@dataclass(frozen=True)
class Event:
    kind: str
    at_s: float  # from the publisher's go
    duration_s: float = 0.0  # link-down only

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s

    def facts(self) -> dict[str, object]:
        return {"kind": self.kind, "at_s": self.at_s, "duration_s": self.duration_s}


def _seconds(text: str) -> float:
    """'20s', '500ms', '20' (s) -> seconds; ValueError for a time too long to be a number (its digits overflow)."""
    seconds = float(text[:-2]) / 1000.0 if text.endswith("ms") else float(text.removesuffix("s"))
    if not math.isfinite(seconds):
        raise ValueError(f"event time {text[:20]}...: is not a finite number")
    return seconds


def parse_events(text: str) -> list[Event]:
    """``kind@time[:duration]`` items, comma-separated, in time order; ValueError names the bad one."""
    events = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        m = _EVENT.match(item)
        if m is None or m["kind"] not in KINDS:
            raise ValueError(f"event {item!r}: expected KIND@TIME[:DURATION] with KIND one of {', '.join(KINDS)} "
                             "(e.g. broker-restart@20s, link-down@30s:5s)")
        duration = _seconds(m["duration"]) if m["duration"] else 0.0
        if (m["kind"] == "link-down") != (duration > 0):
            raise ValueError(f"event {item!r}: link-down takes a duration (link-down@30s:5s), the broker's events none")
        events.append(Event(m["kind"], _seconds(m["at"]), duration))
    events.sort(key=lambda e: e.at_s)
    for a, b in zip(events, events[1:], strict=False):
        if b.at_s < a.end_s:
            raise ValueError(f"events overlap: {a.kind}@{a.at_s:g}s and {b.kind}@{b.at_s:g}s")
    return events


def check_events(text: str) -> str:
    """The option's value as given, once it parses (the CLI's check)."""
    parse_events(text)
    return text.strip()
