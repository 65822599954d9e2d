"""A run's verdict from the container states recorded in tests/fixtures/docker/: the error names the
service that failed first, and a good run has none."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends import docker
from orchestrator.measure.local import Observed, run_broken, verdict
from orchestrator.model.run import RunSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker"
SPEC = RunSpec(scenario="plain", payload=65, samples=100, interval_ms=20)


@dataclass
class FakePublisher:
    said: str = "connection lost"
    service: str = "publisher"

    def error(self) -> str:
        return self.said


def states(name: str) -> list[docker.Container]:
    return docker.parse_containers((FIXTURES / name).read_text())


def test_broker_killed_mid_run_is_named_first_not_the_publisher_that_followed():
    seen = Observed(received=40, publisher_exit_code=1, containers=states("inspect_broker_killed.json"))
    assert run_broken(seen.containers)
    assert verdict(seen, SPEC, FakePublisher()) == \
        "broker failed first (exited with code 137); publisher: connection lost"


def test_publisher_failing_first_gives_its_own_words():
    killed = states("inspect_broker_killed.json")
    only_publisher = [c for c in killed if c.service == "publisher"] + \
        [c for c in states("inspect_tls_up.json")]
    seen = Observed(received=40, publisher_exit_code=1, containers=only_publisher)
    assert verdict(seen, SPEC, FakePublisher("TLS handshake failed")) == \
        "publisher failed first (exited with code 1): TLS handshake failed"


def test_all_running_and_every_message_in_is_ok():
    seen = Observed(received=100, publisher_exit_code=0, containers=states("inspect_tls_up.json"))
    assert not run_broken(seen.containers)
    assert verdict(seen, SPEC, FakePublisher()) is None


def test_messages_missing_with_nothing_failed_says_how_many():
    seen = Observed(received=97, publisher_exit_code=0, containers=states("inspect_tls_up.json"))
    assert verdict(seen, SPEC, FakePublisher()) == f"only 97 of 100 messages arrived within {SPEC.timeout_s():.0f} s"


def test_publisher_still_running_reports_what_it_said():
    seen = Observed(received=100, publisher_exit_code=None, containers=states("inspect_tls_up.json"))
    assert verdict(seen, SPEC, FakePublisher("still publishing")) == "still publishing"


def test_capture_that_exited_cleanly_mid_run_is_still_a_failure():
    up = states("inspect_tls_up.json")
    gone = [c for c in states("inspect_broker_killed.json") if c.service == "capture"]  # exited 0
    seen = Observed(received=100, publisher_exit_code=0, containers=[c for c in up if c.service != "capture"] + gone)
    assert run_broken(seen.containers)
    assert verdict(seen, SPEC, FakePublisher()) == \
        "the capture container stopped mid-run (exited, exit code 0); publisher: ok"
