"""Render Mosquitto's configuration (and, for TLS-1.2-only scenarios, an OpenSSL config) from a Scenario.

Paths are as the broker container sees them: the run folder is mounted at /data and the
entrypoint copies the PKI to /run/testbed/pki, owned by the mosquitto user.

A broker reachable beyond loopback (a board's cell) also gets an ACL (render_acl, config/acl): only the
run's publisher user may write the measured topic, the subscriber user may read it, nobody else anything.
"""

from __future__ import annotations

from orchestrator.lab.pki import CLIENTS
from orchestrator.lab.rabbitmqconf import rabbitmq_record
from orchestrator.model.brokers import WS_PATH, BrokerBuild
from orchestrator.model.scenario import Scenario

CONTAINER_PKI = "/run/testbed/pki"
CONTAINER_PASSWORDS = "/run/testbed/passwords"
CONTAINER_ACL = "/data/config/acl"  # not a secret: user names and a topic
PUBLISHER_USER, SUBSCRIBER_USER = CLIENTS  # the run's users (the CN of a client certificate)
# Mosquitto's `persistence`: off, so a session and its queued QoS 1/2 messages live in the broker's memory only and
# do not survive a broker restart or kill (a fresh broker per cell; a persistent session survives the publisher's
# reconnects, not the broker's). Recorded in the cell.json of cells where it matters (broker_record).
PERSISTENCE = False


# A websockets listener's compression: a server may use only an extension the client offered (RFC 6455 9.1), and
# neither the device (websocket.h) nor paho offers one: no permessage-deflate, the frames carry the packets as they are
PERMESSAGE_DEFLATE = False


def broker_record(build: BrokerBuild | None = None) -> dict[str, object]:
    """cell.json ``broker``: the broker's settings that decide what a session keeps; with ``build`` (a cell that
    runs on another than the default broker) which broker it was and how its listener carries MQTT."""
    out: dict[str, object] = {
        "implementation": "mosquitto", "persistence": PERSISTENCE,
        "sessions": "kept in memory across the client's reconnects; lost when the broker restarts"
        if not PERSISTENCE else "written to the broker's persistence file; kept across a restart"}
    if build is not None and build.implementation == "rabbitmq":
        return {"implementation": build.implementation, "name": build.name, "version": build.version,
                "image": build.image, "tls_library": build.tls_library, "listener": "mqtt", **rabbitmq_record()}
    if build is not None:
        out.update(name=build.name, version=build.version, image=build.image, tls_library=build.tls_library,
                   listener="websockets" if build.websockets else "mqtt", websocket_path=WS_PATH,
                   permessage_deflate=PERMESSAGE_DEFLATE)
    return out


def render_acl(topic: str) -> str:
    """Mosquitto's ACL for an exposed broker: the run's publisher writes ``topic``, the subscriber reads it.
    With certificate auth the user name is the certificate's CN (use_identity_as_username)."""
    return (f"# rendered by testbed: only the run's publisher writes the measured topic, the subscriber reads it\n"
            f"user {PUBLISHER_USER}\ntopic write {topic}\n\nuser {SUBSCRIBER_USER}\ntopic read {topic}\n")


def render_mosquitto_conf(scenario: Scenario, *, acl: bool = False, websocket: bool = False) -> str:
    """The broker's configuration; ``acl``: with the ACL of render_acl (in config/acl) on its listener;
    ``websocket``: the listener speaks MQTT over WebSocket (``protocol websockets``, Mosquitto built with
    libwebsockets: images/broker-mosquitto-2.0.21), plain or TLS as the scenario says, on the scenario's port."""
    lines = [
        f"# rendered by testbed from scenario '{scenario.name}'; do not edit, it is rewritten every run",
        "per_listener_settings true",
        f"persistence {'true' if PERSISTENCE else 'false'}",
        "log_dest stdout",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        "log_timestamp_format %Y-%m-%dT%H:%M:%S",
        "",
        # the only listener: TLS scenarios have NO plaintext listener
        f"listener {scenario.port} 0.0.0.0",
        "protocol websockets" if websocket else "protocol mqtt",
    ]
    if scenario.tls is not None:
        tls = scenario.tls
        lines += [
            f"cafile {CONTAINER_PKI}/ca.crt",
            f"certfile {CONTAINER_PKI}/server.crt",
            f"keyfile {CONTAINER_PKI}/server.key",
            # a MINIMUM in Mosquitto: TLS 1.2-only scenarios are capped by the OpenSSL config (MaxProtocol)
            f"tls_version tlsv{tls.min_version}",
        ]
        if tls.ciphers_tls12:
            lines.append("ciphers " + ":".join(tls.ciphers_tls12))
        if tls.ciphers_tls13:
            lines.append("ciphers_tls1.3 " + ":".join(tls.ciphers_tls13))
        if tls.client_auth == "certificate":
            lines += ["require_certificate true", "use_identity_as_username true"]
        else:
            lines.append("require_certificate false")
    if scenario.anonymous:
        lines.append("allow_anonymous true")
    else:
        lines.append("allow_anonymous false")
        if scenario.tls is None or scenario.tls.client_auth == "password":
            lines.append(f"password_file {CONTAINER_PASSWORDS}")
    if acl:
        lines.append(f"acl_file {CONTAINER_ACL}")
    return "\n".join(lines) + "\n"


def render_openssl_conf(scenario: Scenario) -> str | None:
    """An OPENSSL_CONF for what Mosquitto has no setting for: capping the broker at TLS 1.2, turning
    session tickets off (``Options = -SessionTicket``: the session-ID cache stays); None when neither."""
    tls = scenario.tls
    if tls is None or (tls.max_version != "1.2" and tls.session_tickets):
        return None
    settings = (["MaxProtocol = TLSv1.2"] if tls.max_version == "1.2" else []) + \
        ([] if tls.session_tickets else ["Options = -SessionTicket"])
    return (
        "# rendered by testbed: Mosquitto's tls_version is only a minimum, and it has no setting for tickets\n"
        "openssl_conf = openssl_init\n\n"
        "[openssl_init]\nssl_conf = ssl_sect\n\n"
        "[ssl_sect]\nsystem_default = system_default_sect\n\n"
        "[system_default_sect]\n" + "\n".join(settings) + "\n"
    )
