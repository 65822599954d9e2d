"""Issue 22 part 3 without Docker: a board's cell is published on the board's address only, and its broker,
reachable beyond loopback, demands the run's passwords (also in `plain`) and lets only the run's publisher
write the measured topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import TestbedError
from orchestrator.lab.board_side import board_exposure, with_auth
from orchestrator.lab.brokerconf import render_acl, render_mosquitto_conf
from orchestrator.lab.topology import TOPIC, prepare_run_dir, subscriber_args, topology
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.publishers.board import records


def _directives(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_an_exposed_plain_broker_demands_passwords_and_the_acl() -> None:
    plain = load_scenario("plain")
    exposed = with_auth(plain)
    assert plain.anonymous and not exposed.anonymous and exposed.name == plain.name and exposed.port == plain.port
    conf = _directives(render_mosquitto_conf(exposed, acl=True))
    assert "allow_anonymous false" in conf and "allow_anonymous true" not in conf
    assert any(d.startswith("password_file ") for d in conf)
    listener = conf.index("listener 1883 0.0.0.0")
    assert conf.index("acl_file /data/config/acl") > listener  # per_listener_settings: the listener's own
    assert "acl_file" not in render_mosquitto_conf(plain)  # not exposed: the study's broker as it was


def test_the_acl_lets_only_the_publisher_write_and_the_subscriber_read() -> None:
    acl = _directives(render_acl(TOPIC))
    assert acl == ["user publisher", f"topic write {TOPIC}", "user subscriber", f"topic read {TOPIC}"]


@pytest.mark.parametrize("name,auth", [("plain", "password"), ("tls", "password")])
def test_authenticated_scenarios_are_left_as_they_are_or_get_passwords(name: str, auth: str) -> None:
    s = with_auth(load_scenario(name))
    assert not s.anonymous and (s.tls is None or s.tls.client_auth == auth)


def test_a_certificate_scenario_and_an_anonymous_tls_one() -> None:
    base = load_scenario("tls")
    assert base.tls is not None
    cert = base.model_copy(update={"tls": base.tls.model_copy(update={"client_auth": "certificate"})})
    assert with_auth(cert) is cert
    anon_tls = base.model_copy(update={"tls": base.tls.model_copy(update={"client_auth": "none"})})
    assert anon_tls.anonymous
    fixed = with_auth(anon_tls)
    assert fixed.tls is not None and fixed.tls.client_auth == "password" and not fixed.anonymous


def test_the_exposure_says_where_and_how_it_differs_from_the_studys_baseline() -> None:
    exp = board_exposure(load_scenario("plain"), "192.0.2.7", TOPIC)
    facts = exp.facts()
    assert facts["published_on"] == "192.0.2.7" and facts["time_echo"].startswith("192.0.2.7:")
    assert facts["baseline_auth"] == "anonymous" and facts["auth"] == "password" and facts["differs_from_baseline"]
    assert facts["acl"]["publisher"] == f"write {TOPIC}" and facts["acl"]["subscriber"] == f"read {TOPIC}"
    assert "192.0.2.7 only" in exp.line() and "0.0.0.0" in exp.line() and "per-run password" in exp.line()
    tls = board_exposure(load_scenario("tls"), "192.0.2.7", TOPIC).facts()
    assert tls["baseline_auth"] == tls["auth"] == "password" and not tls["differs_from_baseline"]
    with pytest.raises(TestbedError):
        board_exposure(load_scenario("plain"), "127.0.0.1", TOPIC)


def test_the_board_the_subscriber_and_the_ports_follow_the_exposure(tmp_path: Path) -> None:
    exp = board_exposure(load_scenario("plain"), "192.0.2.7", TOPIC)
    lay, pki = prepare_run_dir(tmp_path / "run", exp.scenario, acl=True)
    assert pki is not None and (lay.config / "acl").read_text() == render_acl(TOPIC)
    topo = topology(exp.scenario, lay, bind=exp.address)
    assert topo.bind == "192.0.2.7"  # never 0.0.0.0
    args = subscriber_args(exp.scenario, lay)
    assert args[args.index("--username") + 1] == "subscriber"
    spec = RunSpec(scenario="plain", publisher="esp32", serial_port="/dev/null", payload=65, samples=2)
    cell = records.run_cell(exp.scenario, lay, pki, spec, exp.address, 1883, None)
    assert cell.username == "publisher" and cell.password == pki.password_for("publisher")
    assert cell.topic is None  # the board's default topic, as in the study: no per-run token in it
    # the study's anonymous baseline, not exposed: no password, no ACL, loopback
    lay2, _ = prepare_run_dir(tmp_path / "run2", load_scenario("plain"))
    assert not (lay2.config / "acl").exists()
    assert topology(load_scenario("plain"), lay2).bind == "127.0.0.1"
    assert records.run_cell(load_scenario("plain"), lay2, None, spec, "h", 1883, None).password is None


def test_a_scenario_copy_keeps_its_validation() -> None:
    s = with_auth(load_scenario("plain"))
    assert Scenario.model_validate(s.model_dump()).anonymous is False
