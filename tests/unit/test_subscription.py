"""The subscriber subscribes as the cell asks (orchestrator/model/subscription.py): its QoS, MQTT version and
session reach every place the subscriber is started - the single-host container (and a kept-up lab's cell), the
broker host of a lab across hosts, native or under compose - from the one object RunSpec.subscription builds."""

from __future__ import annotations

import shlex
from pathlib import Path

from test_multihost import roles

from orchestrator.clients import subscriber
from orchestrator.lab import remote
from orchestrator.lab.topology import prepare_run_dir, subscriber_args, topology
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.model.subscription import AT_QOS0, Subscription


def _flags(args: list[str]) -> dict[str, str]:
    return {a: args[i + 1] for i, a in enumerate(args[:-1])
            if a in ("--qos", "--mqtt", "--session", "--session-expiry-s")}


def test_the_study_cell_keeps_its_command_line() -> None:
    spec = RunSpec(scenario="tls")
    assert spec.subscription == AT_QOS0 and AT_QOS0.argv() == ["--qos", "0"]
    assert Subscription(qos=1, session="persistent").argv() == ["--qos", "1", "--session", "persistent"]


def test_every_subscriber_gets_the_cells_qos_mqtt_and_session(tmp_path: Path) -> None:
    spec = RunSpec(scenario="plain", qos=1, mqtt="5", session="persistent", session_expiry_s=120,
                   inventory="lab.yml", samples=5)
    want = {"--qos": "1", "--mqtt": "5", "--session": "persistent", "--session-expiry-s": "120"}
    sc = load_scenario("plain")
    lay, _ = prepare_run_dir(tmp_path / "run", sc)
    assert _flags(subscriber_args(sc, lay, spec.subscription)) == want
    assert _flags(topology(sc, lay, sub=spec.subscription).subscriber_args) == want  # a run's, a kept-up lab's
    native = roles(testbed_broker_runtime="native")
    assert _flags(remote.subscriber_command(sc, lay, spec, native)) == want
    env = remote.compose_vars(sc, lay, spec, roles())  # a Docker broker host
    assert _flags(shlex.split(env["TESTBED_SUBSCRIBER_ARGS"])) == want
    parsed = subscriber.build_parser().parse_args(["--out", "x", *spec.subscription.argv()])
    assert (parsed.qos, parsed.mqtt, parsed.session, parsed.session_expiry_s) == (1, "5", "persistent", 120)
