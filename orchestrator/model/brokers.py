"""The broker builds a cell can run on, and which one a cell runs on.

``mosquitto`` is Debian 12's Mosquitto 2.0.11 (images/broker), built without websockets; ``mosquitto-2.0.21`` is
Debian 13's (images/broker-mosquitto-2.0.21), built with libwebsockets, on OpenSSL 3.5. Until a broker axis exists
(issue 43 part 3), a cell's broker follows from its transport: a websocket cell runs on mosquitto-2.0.21 (the one
that speaks it), every other cell on mosquitto, as before. cell.json's ``broker`` and the manifest's image versions
(mosquitto, libssl3*, libwebsockets*, read inside the image) say which ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.model.axes import AXES

WS_PATH = "/mqtt"  # the device's (websocket.h) and the subscriber's path; Mosquitto's listener serves any


@dataclass(frozen=True)
class BrokerBuild:
    name: str  # the broker's value (a broker axis's, once there is one)
    image: str  # its image's name (orchestrator/backends/images.py IMAGES)
    version: str  # the Mosquitto version its Debian release ships
    websockets: bool  # built with libwebsockets: a `protocol websockets` listener runs


BROKERS: dict[str, BrokerBuild] = {b.name: b for b in (
    BrokerBuild("mosquitto", "broker", "2.0.11", websockets=False),
    BrokerBuild("mosquitto-2.0.21", "broker-mosquitto-2.0.21", "2.0.21", websockets=True),
)}


def broker_of(values: Mapping[str, Any]) -> BrokerBuild:
    """The broker a cell runs on: mosquitto-2.0.21 for a websocket cell, else mosquitto."""
    return BROKERS["mosquitto-2.0.21" if AXES.value(values, "transport") == "websocket" else "mosquitto"]
