"""The broker builds a cell can run on (axis ``broker``), and which one a cell runs on.

``mosquitto`` is Debian 12's Mosquitto 2.0.11 (images/broker), built without websockets; ``mosquitto-2.0.21`` is
Debian 13's (images/broker-mosquitto-2.0.21), built with libwebsockets, on OpenSSL 3.5; ``rabbitmq`` is Debian 13's
RabbitMQ 4.0.5 with its MQTT plugin (images/broker-rabbitmq), TLS in Erlang/OTP's own ssl application
(docs/rabbitmq.md). ``auto`` (the axis's default) keeps the choice the transport made before the axis existed: a
websocket cell runs on mosquitto-2.0.21 (the one that speaks it), every other cell on mosquitto. cell.json's
``broker`` and the image versions read inside it (mosquitto, libssl3*, libwebsockets*, rabbitmq-server, erlang-ssl)
say which ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.model.axes import AXES

WS_PATH = "/mqtt"  # the device's (websocket.h) and the subscriber's path; Mosquitto's listener serves any
AUTO = "auto"  # the broker axis's default: the transport's broker


@dataclass(frozen=True)
class BrokerBuild:
    name: str  # the broker axis's value
    image: str  # its image's name (orchestrator/backends/images.py IMAGES)
    version: str  # the broker's version its Debian release ships
    websockets: bool  # its listener can speak MQTT over WebSocket
    implementation: str = "mosquitto"  # which broker program (lab/broker.py broker_for)
    tls_library: str = "OpenSSL"
    qos2: bool = True  # takes QoS 2 PUBLISHes and subscriptions
    tls12_tickets: bool = True  # can issue TLS 1.2 session tickets (RFC 5077)


BROKERS: dict[str, BrokerBuild] = {b.name: b for b in (
    BrokerBuild("mosquitto", "broker", "2.0.11", websockets=False),
    BrokerBuild("mosquitto-2.0.21", "broker-mosquitto-2.0.21", "2.0.21", websockets=True),
    # Erlang's ssl has no TLS 1.2 session tickets (it resumes TLS 1.2 by session ID only); the MQTT plugin has no
    # QoS 2; Web MQTT (its WebSocket listener) is not configured here yet
    BrokerBuild("rabbitmq", "broker-rabbitmq", "4.0.5", websockets=False, implementation="rabbitmq",
                tls_library="Erlang/OTP ssl", qos2=False, tls12_tickets=False),
)}


def broker_of(values: Mapping[str, Any]) -> BrokerBuild:
    """The broker a cell runs on: the one its ``broker`` names; ``auto``: mosquitto-2.0.21 for a websocket cell, else
    mosquitto."""
    name = AXES.value(values, "broker")
    if name == AUTO:
        name = "mosquitto-2.0.21" if AXES.value(values, "transport") == "websocket" else "mosquitto"
    return BROKERS[name]
