"""The broker axis's rabbitmq value (issue 43 part 3), without Docker: the axis and which build a cell runs on, the
named rules that refuse what RabbitMQ cannot do before anything starts, the rabbitmq.conf rendered per scenario,
the users' password hashes the image's entrypoint writes, the image built on demand, and cell.json's record."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends import images
from orchestrator.lab.brokerconf import broker_record
from orchestrator.lab.rabbitmqconf import ERL_ARGS, render_rabbitmq_conf
from orchestrator.lab.topology import prepare_run_dir
from orchestrator.model import brokers, rules
from orchestrator.model.axes import AXES
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.paths import source
from tests.skips import skip_or_fail


def test_the_axis_names_every_build_and_auto_keeps_the_transports_choice() -> None:
    axis = AXES["broker"]
    assert axis.choices == (brokers.AUTO, *brokers.BROKERS) and axis.default == brokers.AUTO
    assert axis.sweep is not None and axis.sweep.name == "brokers" and axis.sweep.lab
    assert brokers.broker_of({}).name == "mosquitto"
    assert brokers.broker_of({"transport": "websocket"}).name == "mosquitto-2.0.21"
    rabbit = brokers.broker_of({"broker": "rabbitmq"})
    assert (rabbit.image, rabbit.version, rabbit.implementation) == ("broker-rabbitmq", "4.0.5", "rabbitmq")
    assert axis.word("rabbitmq") == "rabbitmq" and axis.word("auto") == ""
    assert RunSpec(scenario="tls", broker="rabbitmq", qos=1).subscription.build == rabbit


@pytest.mark.parametrize(("values", "rule"), [
    ({"qos": 2}, "rabbitmq-has-no-qos2"),
    ({"connection": "resume-ticket"}, "rabbitmq-resumes-tls12-by-session-id"),
    ({"transport": "websocket"}, "websocket-needs-a-broker-that-speaks-it"),
    ({"inventory": "/lab/inventory.yml"}, "broker-images-run-on-this-host"),
    ({"publisher": "esp32", "serial_port": "/dev/ttyUSB0"}, "rabbitmq-board-acl-not-written"),
])
def test_what_rabbitmq_cannot_do_is_refused_by_name(values: dict[str, object], rule: str) -> None:
    with pytest.raises(ValueError, match=rf"\(rule {rule}\)"):
        RunSpec(scenario="tls", broker="rabbitmq", **values)
    if rule.startswith("rabbitmq"):
        RunSpec(scenario="tls", broker="mosquitto", **values)  # Mosquitto can


def test_what_rabbitmq_can_do_is_not_refused() -> None:
    for values in ({"qos": 1}, {"qos": 0, "mqtt": "5"}, {"connection": "resume-id"}, {"connection": "reconnect"},
                   {"devices": 20}, {"session": "persistent", "qos": 1}):
        spec = RunSpec(scenario="tls", broker="rabbitmq", **values)
        rules.check_scenario(load_scenario("tls"), spec.values())


def test_the_scenario_rules_refuse_tls13_resumption_and_client_certificates() -> None:
    v = RunSpec(scenario="tls13-chacha20", broker="rabbitmq", device_stack="mbedtls-3.6", connection="resume-id")
    with pytest.raises(rules.RuleViolation, match=r"by ticket \(PSK\) only.*\(rule rabbitmq-tls-it-can-express\)"):
        rules.check_scenario(load_scenario("tls13-chacha20"), v.values())
    rules.check_scenario(load_scenario("tls13-chacha20"), v.values() | {"connection": "persistent"})
    certs = load_scenario("tls").model_copy(update={"tls": load_scenario("tls").tls.model_copy(  # type: ignore[union-attr]
        update={"client_auth": "certificate"})})
    with pytest.raises(rules.RuleViolation, match=r"by certificate.*\(rule rabbitmq-tls-it-can-express\)"):
        rules.check_scenario(certs, RunSpec(scenario="tls", broker="rabbitmq").values())
    rules.check_scenario(certs, RunSpec(scenario="tls").values())  # Mosquitto takes it


def _conf(scenario: Scenario) -> dict[str, str]:
    lines = [ln for ln in render_rabbitmq_conf(scenario).splitlines() if ln and not ln.startswith("#")]
    pairs = [ln.split(" = ", 1) for ln in lines]
    assert all(len(p) == 2 for p in pairs), lines
    assert len({k for k, _ in pairs}) == len(pairs)  # no key twice
    return dict(pairs)  # type: ignore[arg-type]


def test_tls_listener_versions_and_suites_are_the_scenarios() -> None:
    conf = _conf(load_scenario("tls"))
    assert conf["mqtt.listeners.ssl.default"] == "8883" and conf["mqtt.listeners.tcp"] == "none"
    assert conf["listeners.tcp"] == "none"  # no AMQP listener
    assert [conf["ssl_options.versions.1"], conf["ssl_options.versions.2"]] == ["tlsv1.2", "tlsv1.3"]
    assert [conf["ssl_options.ciphers.1"], conf["ssl_options.ciphers.2"]] == [
        "ECDHE-ECDSA-CHACHA20-POLY1305", "TLS_CHACHA20_POLY1305_SHA256"]
    assert "ssl_options.ciphers.3" not in conf and conf["ssl_options.honor_cipher_order"] == "true"
    assert conf["ssl_options.certfile"] == "/run/testbed/pki/server.crt" and conf["mqtt.allow_anonymous"] == "false"
    assert conf["definitions.local.path"] == "/run/testbed/definitions.json"
    assert (conf["mqtt.vhost"], conf["mqtt.exchange"]) == ("/", "amq.topic")
    only12 = _conf(load_scenario("tls-aes128gcm"))
    assert only12["ssl_options.versions.1"] == "tlsv1.2" and "ssl_options.versions.2" not in only12
    assert only12["ssl_options.ciphers.1"] == "ECDHE-ECDSA-AES128-GCM-SHA256" and "ssl_options.ciphers.2" not in only12
    only13 = _conf(load_scenario("tls13-chacha20"))
    assert (only13["ssl_options.versions.1"], only13["ssl_options.ciphers.1"]) == (
        "tlsv1.3", "TLS_CHACHA20_POLY1305_SHA256")
    assert "ssl_options.versions.2" not in only13 and "ssl_options.ciphers.2" not in only13


def test_plain_has_the_tcp_listener_only_and_maps_anonymous_clients() -> None:
    conf = _conf(load_scenario("plain"))
    assert conf["mqtt.listeners.tcp.default"] == "1883" and not any(k.startswith("ssl_options") for k in conf)
    assert "mqtt.listeners.ssl.default" not in conf
    assert (conf["mqtt.allow_anonymous"], conf["mqtt.default_user"], conf["loopback_users"]) == (
        "true", "anonymous", "none")


def test_the_run_folder_gets_rabbitmq_conf_and_the_record_names_the_vm_flags(tmp_path: Path) -> None:
    build = brokers.BROKERS["rabbitmq"]
    lay, _pki = prepare_run_dir(tmp_path / "cell", load_scenario("tls"), build=build)
    assert (lay.config / "rabbitmq.conf").read_text() == render_rabbitmq_conf(load_scenario("tls"))
    assert not (lay.config / "mosquitto.conf").exists()
    record = broker_record(build)
    assert record["erl_args"] == ERL_ARGS == "+sbwt none +sbwtdcpu none +sbwtdio none"
    assert (record["implementation"], record["version"], record["tls_library"]) == ("rabbitmq", "4.0.5",
                                                                                    "Erlang/OTP ssl")
    entrypoint = source("images/broker-rabbitmq/entrypoint.sh").read_text()
    assert f'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="{ERL_ARGS}"' in entrypoint  # what the record says is what runs


def test_the_entrypoint_hashes_passwords_as_rabbitmq_does() -> None:
    """rabbit_password_hashing_sha256: base64(salt + sha256(salt + password)), a 4-byte salt, read back in Python."""
    if shutil.which("openssl") is None:
        skip_or_fail("openssl is missing")
    script = source("images/broker-rabbitmq/entrypoint.sh").read_text()
    start = script.index("hash_password() {")
    function = script[start:script.index("\n}\n", start) + 3]
    password = "pa:ss wörd-1"
    out = subprocess.run(["sh", "-c", f'PRIV=$(mktemp -d); {function}\nhash_password "$1"; rm -r "$PRIV"', "sh",
                          password], capture_output=True, text=True, check=True).stdout
    raw = base64.b64decode(out)
    assert len(raw) == 4 + 32 and raw[4:] == hashlib.sha256(raw[:4] + password.encode()).digest()


def test_its_image_is_built_on_demand_only(monkeypatch: pytest.MonkeyPatch) -> None:
    s = images.spec("broker-rabbitmq")
    assert s.on_demand and s.suite == "trixie" and s not in images.built_by_default() and s in images.buildable()
    assert "images/broker/healthcheck.sh" in s.inputs  # its copied health check is part of its identity
    built: list[list[str]] = []
    monkeypatch.setattr(images, "build_images", lambda names, **_: built.append(list(names)) or {})
    monkeypatch.setattr(images, "image_exists", lambda _tag: True)
    assert not images.build_on_demand("broker-rabbitmq") and built == []
    monkeypatch.setattr(images, "image_exists", lambda _tag: False)
    assert not images.build_on_demand("broker") and built == []  # built by `testbed images build`, never here
    assert images.build_on_demand("broker-rabbitmq", progress=lambda _m: None) and built == [["broker-rabbitmq"]]
