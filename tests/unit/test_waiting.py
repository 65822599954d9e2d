"""The one wait mechanism, on a fake clock: no real sleeping, no timing assertions."""

from __future__ import annotations

import pytest

from orchestrator.errors import TestbedError
from orchestrator.waiting import Clock, poll, throttled, wait_until


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s

    @property
    def clock(self) -> Clock:
        return Clock(now=self.now, sleep=self.sleep)


def counter(values: list[int]):
    it = iter(values)
    last = [0]

    def probe() -> int:
        last[0] = next(it, last[0])
        return last[0]
    return probe


def test_poll_returns_as_soon_as_the_condition_holds():
    fake = FakeClock()
    waited = poll(counter([1, 2, 3, 4]), lambda n: n >= 3, 10, interval_s=0.5, clock=fake.clock)
    assert waited.met and waited.value == 3
    assert fake.sleeps == [0.5, 0.5]


def test_poll_on_timeout_returns_the_last_value_probed_at_the_deadline():
    fake = FakeClock()
    waited = poll(counter([1, 2, 3]), lambda n: n >= 10, 1.2, interval_s=0.5, clock=fake.clock)
    assert not waited.met and waited.value == 3
    # never sleeps past the deadline: the last sleep is cut to what is left, then one final probe
    assert fake.sleeps == [0.5, 0.5, pytest.approx(0.2)]
    assert waited.elapsed_s == pytest.approx(1.2)


def test_poll_probes_once_even_with_no_time():
    fake = FakeClock()
    waited = poll(lambda: "x", lambda v: v == "x", 0, interval_s=1, clock=fake.clock)
    assert waited.met and fake.sleeps == []


def test_wait_until_returns_the_first_real_value():
    fake = FakeClock()
    answers = iter([None, {}, {"subscribed": True}])
    assert wait_until(lambda: next(answers), 5, interval_s=0.2, describe="x", clock=fake.clock) == \
        {"subscribed": True}


def test_wait_until_timeout_names_the_wait_and_attaches_evidence_gathered_then():
    fake = FakeClock()
    gathered_at: list[float] = []

    def evidence() -> str:
        gathered_at.append(fake.t)
        return "broker log tail"

    with pytest.raises(TestbedError) as exc:
        wait_until(lambda: None, 3, interval_s=1, describe="the subscriber did not subscribe",
                   evidence=evidence, hint="look", clock=fake.clock)
    assert exc.value.message == "the subscriber did not subscribe within 3 s"
    assert exc.value.evidence == "broker log tail" and exc.value.hint == "look"
    assert gathered_at == [1003.0]


def test_a_probe_that_raises_ends_the_wait_with_its_own_error():
    fake = FakeClock()

    def probe() -> None:
        raise TestbedError("the subscriber container died")

    with pytest.raises(TestbedError, match="container died"):
        wait_until(probe, 30, interval_s=0.2, describe="never used", clock=fake.clock)
    assert fake.sleeps == []


def test_throttled_runs_the_check_at_most_once_per_period():
    fake = FakeClock()
    calls: list[float] = []

    def check() -> bool:
        calls.append(fake.t)
        return False

    every = throttled(check, 1.0, clock=fake.clock)
    for _ in range(10):  # probes 0.25 s apart, from 1000.0 to 1002.25
        every()
        fake.sleep(0.25)
    assert calls == [1000.0, 1001.0, 1002.0]


def test_throttled_passes_the_checks_answer_through():
    fake = FakeClock()
    assert throttled(lambda: True, 1.0, clock=fake.clock)() is True
