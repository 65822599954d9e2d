"""The one way to wait: probe a condition every ``interval_s`` until it holds or ``timeout_s`` passes.

`poll` returns the last value and whether the condition held (for a caller that needs the value on a
timeout, e.g. how many messages arrived); `wait_until` raises one TestbedError on a timeout, with the
evidence its callback gathers at that moment. A probe may raise TestbedError itself to stop the wait
early (the subscriber's container died: waiting longer cannot help).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from orchestrator.errors import TestbedError

T = TypeVar("T")


@dataclass(frozen=True)
class Clock:
    """What a wait reads and sleeps on; tests pass a fake one that advances instantly."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


REAL_CLOCK = Clock()


@dataclass(frozen=True)
class Waited(Generic[T]):
    value: T
    met: bool
    elapsed_s: float


def poll(probe: Callable[[], T], until: Callable[[T], bool], timeout_s: float, *, interval_s: float,
         clock: Clock = REAL_CLOCK) -> Waited[T]:
    """Call ``probe`` until ``until(value)`` holds or ``timeout_s`` has passed; the last value either way.

    The probe runs at least once, and once more at (or after) the deadline, so a condition that became
    true during the last sleep is not reported as a timeout.
    """
    start = clock.now()
    while True:
        value = probe()
        elapsed = clock.now() - start
        if until(value):
            return Waited(value, True, elapsed)
        if elapsed >= timeout_s:
            return Waited(value, False, elapsed)
        clock.sleep(min(interval_s, timeout_s - elapsed))


def wait_until(probe: Callable[[], T | None], timeout_s: float, *, interval_s: float, describe: str,
               evidence: Callable[[], str | None] = lambda: None, hint: str | None = None,
               clock: Clock = REAL_CLOCK) -> T:
    """The probe's first value that is not None (or falsy); TestbedError "<describe> within N s" on a
    timeout, its evidence gathered by ``evidence`` then."""
    waited = poll(probe, bool, timeout_s, interval_s=interval_s, clock=clock)
    if waited.met and waited.value is not None:
        return waited.value
    raise TestbedError(f"{describe} within {timeout_s:g} s", evidence=evidence(), hint=hint)


def throttled(check: Callable[[], bool], every_s: float, *, clock: Clock = REAL_CLOCK) -> Callable[[], bool]:
    """``check`` run at most once per ``every_s`` (False in between): for a costly check inside a fast poll."""
    last: list[float | None] = [None]

    def run_check() -> bool:
        now = clock.now()
        if last[0] is not None and now - last[0] < every_s:
            return False
        last[0] = now
        return check()

    return run_check
