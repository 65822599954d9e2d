"""The broker behind one interface (orchestrator/lab/broker.py): Mosquitto's files in a run folder's config/, the
container whose process a cell measures, and what says it is ready."""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends import compose
from orchestrator.lab.broker import BROKER
from orchestrator.lab.brokerconf import render_acl, render_mosquitto_conf, render_openssl_conf
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]


def test_mosquittos_files_follow_the_scenario_and_the_acl(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    lay.config.mkdir()
    tls13 = load_scenario("tls13-chacha20")
    BROKER.write_config(lay, tls13, topic="t/x", acl=True)
    assert (lay.config / "mosquitto.conf").read_text() == render_mosquitto_conf(tls13, acl=True)
    assert (lay.config / "acl").read_text() == render_acl("t/x")
    ossl = render_openssl_conf(tls13)
    assert ((lay.config / "openssl.cnf").read_text() if ossl else None) == (ossl or None)

    plain = load_scenario("plain")
    BROKER.write_config(lay, plain, topic="t/x", acl=False)  # a later run in the same folder
    assert (lay.config / "mosquitto.conf").read_text() == render_mosquitto_conf(plain, acl=False)
    assert not (lay.config / "acl").exists()
    assert (lay.config / "openssl.cnf").exists() == bool(render_openssl_conf(plain))


def test_the_measured_process_and_the_readiness_are_the_broker_services() -> None:
    assert BROKER.container() == compose.container_name("broker") and BROKER.service in compose.CORE_SERVICES
    assert (REPO / BROKER.healthcheck).is_file()
    assert BROKER.name == "mosquitto"  # the manifest's environment names its version so
