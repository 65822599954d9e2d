"""A cell's events on its timeline (issue 27 part 2), run from the publisher's go in a thread of their own.

broker-restart / broker-kill: the broker PROCESS is ended (SIGTERM / SIGKILL) and a new one started in the same
container (lab/broker.py restart_process): the capture shares the broker container's network namespace, so the
container is never restarted. link-down: every device's link (the publisher container's namespace, all devices
of a fleet) dropped both ways by nftables in the impairment helper, then restored (backends/impairment/linkdown.py).
Each event is recorded as it happened (epoch seconds, the capture's clock): cell.json ``events``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from orchestrator.backends.impairment.linkdown import LinkDown
from orchestrator.errors import TestbedError
from orchestrator.lab.broker import BROKER
from orchestrator.model.events import Event, parse_events
from orchestrator.publishers import Publisher


class Timeline:
    """start() at the publisher's go; stop() ends what is still going (a link is always restored) and returns the
    record of every event."""

    def __init__(self, text: str, publisher_container: str, status: Callable[[str], None] = lambda _m: None) -> None:
        self.events = parse_events(text)
        self.status = status
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._link = LinkDown(publisher_container) if any(e.kind == "link-down" for e in self.events) else None
        self.t0 = 0.0
        self._ended: float | None = None

    def __bool__(self) -> bool:
        return bool(self.events)

    def start(self) -> Timeline:
        if not self.events:
            return self
        if self._link is not None:
            self._link.prepare()  # the helper is up before the go: the event itself is two nft calls
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._run, name="cell-events", daemon=True)
        self._thread.start()
        return self

    def _wait_until(self, t: float) -> bool:
        return not self._stop.wait(max(0.0, t - time.time()))

    def _run(self) -> None:
        for ev in self.events:
            if not self._wait_until(self.t0 + ev.at_s):
                self.records.append({**ev.facts(), "skipped": "the cell ended first"})
                continue
            rec: dict[str, Any] = {**ev.facts(), "t_start": time.time()}
            self.records.append(rec)
            self.status(f"event: {ev.kind} at {ev.at_s:g} s")
            try:
                self._one(ev, rec)
            except TestbedError as exc:
                rec["error"] = exc.message
            rec["t_end"] = time.time()

    def _one(self, ev: Event, rec: dict[str, Any]) -> None:
        if ev.kind in ("broker-restart", "broker-kill"):
            BROKER.restart_process(kill=ev.kind == "broker-kill")
            rec["broker_back"] = time.time()  # a new process listens
            return
        assert self._link is not None
        self._link.down()
        rec["t_down"] = time.time()
        self._wait_until(rec["t_down"] + ev.duration_s)  # down for its duration; a stop restores it at once
        listing = self._link.up_counted()
        rec["t_up"] = time.time()
        rec["dropped"] = _counters(listing)

    def publisher_ended(self, publisher: Publisher, grace_s: float = 2.0) -> bool:
        """The publisher's program has exited, ``grace_s`` ago or more (its last messages reach the subscriber)."""
        if publisher.wait_exit(0) is None:
            return False
        if self._ended is None:
            self._ended = time.monotonic()
        return time.monotonic() - self._ended >= grace_s

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self._link is not None:
            self._link.close()
        for rec in self.records:
            rec["at_epoch"] = self.t0 + float(rec["at_s"])
        return self.records


def _counters(listing: str) -> dict[str, int]:
    """Packets dropped in and out, from ``nft list table``'s counters."""
    out: dict[str, int] = {}
    chain = ""
    for line in listing.splitlines():
        words = line.split()
        if words[:1] == ["chain"]:
            chain = words[1]
        if "counter" in words and "packets" in words:
            out[chain] = int(words[words.index("packets") + 1])
    return out

