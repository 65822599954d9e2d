"""Render RabbitMQ's configuration (rabbitmq.conf, the ini-like "sysctl" format of RabbitMQ 3.7+) from a Scenario.

The broker of ``--broker rabbitmq`` (images/broker-rabbitmq: Debian 13's RabbitMQ 4.0.5 and its MQTT plugin). As
for Mosquitto (lab/brokerconf.py) the scenario's one listener, MQTT only: plain on its port (1883) or TLS on its
port (8883), never both, and no AMQP listener (``listeners.tcp = none``). TLS is restricted to the scenario's
versions and suites (``ssl_options.versions``, ``ssl_options.ciphers``: Erlang's ssl takes OpenSSL's TLS 1.2 names
and the RFC names of TLS 1.3) with the server's order honoured, the cell's PKI as the container sees it (the
entrypoint copies it to /run/testbed/pki). Erlang's ssl resumes TLS 1.2 by session ID (``reuse_sessions``, its
default) and issues no TLS 1.2 ticket; its TLS 1.3 server tickets are off by default and stay so.

Users: the run's publisher and subscriber with their passwords (pki/passwords.txt), created by the image's
entrypoint in a definitions file it loads at boot (hashed there as RabbitMQ's sha256 scheme: never a password in
the config); each has every permission on the vhost ``/``, where the MQTT plugin publishes to ``amq.topic``. An
anonymous scenario (plain) maps an anonymous client to the user ``anonymous`` (``mqtt.default_user``), allowed
beyond loopback (``loopback_users = none``).

The Erlang VM's schedulers do not busy-wait (ERL_ARGS, given to the VM by the image's entrypoint and recorded in
cell.json's broker): a busy-waiting scheduler would spin on a CPU between messages, which the broker's CPU per
message would count and Mosquitto's would not.
"""

from __future__ import annotations

from orchestrator.model.scenario import Scenario

CONTAINER_PKI = "/run/testbed/pki"
CONTAINER_DEFINITIONS = "/run/testbed/definitions.json"  # written by images/broker-rabbitmq/entrypoint.sh
ERL_ARGS = "+sbwt none +sbwtdcpu none +sbwtdio none"  # images/broker-rabbitmq/entrypoint.sh sets the same
ANONYMOUS_USER = "anonymous"  # an anonymous client's user (entrypoint.sh creates it for an anonymous scenario)
VHOST, EXCHANGE = "/", "amq.topic"


def tls_versions(scenario: Scenario) -> list[str]:
    """Erlang's names of the TLS versions the scenario allows (tlsv1.2, tlsv1.3)."""
    assert scenario.tls is not None
    return [f"tlsv{v}" for v in ("1.2", "1.3") if scenario.tls.min_version <= v <= scenario.tls.max_version]


def tls_ciphers(scenario: Scenario) -> list[str]:
    """The suites in the broker's order: TLS 1.2's OpenSSL names, then TLS 1.3's RFC names, of the versions allowed."""
    tls = scenario.tls
    assert tls is not None
    versions = tls_versions(scenario)
    return ([s.openssl for s in tls.suites("1.2")] if "tlsv1.2" in versions else []) + \
        ([s.iana for s in tls.suites("1.3")] if "tlsv1.3" in versions else [])


def render_rabbitmq_conf(scenario: Scenario) -> str:
    """The broker's rabbitmq.conf for ``scenario``."""
    lines = [
        f"# rendered by testbed from scenario '{scenario.name}'; do not edit, it is rewritten every run",
        "listeners.tcp = none",  # no AMQP listener: MQTT only
        "log.console = true", "log.console.level = info", "log.file = false",
        "definitions.import_backend = local_filesystem", f"definitions.local.path = {CONTAINER_DEFINITIONS}",
        f"mqtt.vhost = {VHOST}", f"mqtt.exchange = {EXCHANGE}",
    ]
    if scenario.tls is None:
        lines += [f"mqtt.listeners.tcp.default = {scenario.port}"]
    else:
        lines += ["mqtt.listeners.tcp = none", f"mqtt.listeners.ssl.default = {scenario.port}",
                  f"ssl_options.cacertfile = {CONTAINER_PKI}/ca.crt",
                  f"ssl_options.certfile = {CONTAINER_PKI}/server.crt",
                  f"ssl_options.keyfile = {CONTAINER_PKI}/server.key",
                  "ssl_options.verify = verify_none", "ssl_options.fail_if_no_peer_cert = false",
                  "ssl_options.honor_cipher_order = true", "ssl_options.honor_ecc_order = true"]
        lines += [f"ssl_options.versions.{i} = {v}" for i, v in enumerate(tls_versions(scenario), 1)]
        lines += [f"ssl_options.ciphers.{i} = {c}" for i, c in enumerate(tls_ciphers(scenario), 1)]
    if scenario.anonymous:
        lines += ["mqtt.allow_anonymous = true", f"mqtt.default_user = {ANONYMOUS_USER}",
                  f"mqtt.default_pass = {ANONYMOUS_USER}", "loopback_users = none"]
    else:
        lines.append("mqtt.allow_anonymous = false")
    return "\n".join(lines) + "\n"


def rabbitmq_record() -> dict[str, object]:
    """What cell.json's ``broker`` says of a rabbitmq cell beyond its build."""
    return {"erl_args": ERL_ARGS, "tls12_resumption": "session ID (Erlang ssl reuse_sessions); no session ticket",
            "tls13_session_tickets": False, "vhost": VHOST, "exchange": EXCHANGE,
            "sessions": "kept in memory across the client's reconnects; the node's database is wiped at every "
                        "broker (re)start, so a restart loses them as Mosquitto's does"}
