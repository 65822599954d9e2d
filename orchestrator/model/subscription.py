"""How the run's subscriber subscribes: the cell's QoS, MQTT version and session, built once from the RunSpec
(RunSpec.subscription) and handed to every place that starts the subscriber (lab/topology.py subscriber_args: the
container of a single-host run or a kept-up lab's cell, the broker host of a lab across hosts, native or compose).

The subscriber takes the axes the device takes (orchestrator/model/axes.py qos, mqtt, session, session_expiry_s):
its SUBSCRIBE's QoS (the broker delivers at the lower of the PUBLISH's and this), its CONNECT's protocol level,
and a persistent session (3.1.1 Clean Session 0; MQTT 5 Clean Start 1 on its first connection, 0 on a reconnect,
with the Session Expiry Interval) so the broker queues the QoS 1/2 messages that arrive while its connection is
lost. The flags beyond --qos appear only when not the default: a study cell's command line is unchanged.
It also takes the cell's MQTT transport (axis ``transport``): over WebSocket (paho's websocket transport) when the
device's is, as the broker's listener then speaks nothing else; and the cell's broker (axis ``broker``), which
changes no flag of the subscriber but the broker image of the lab it subscribes in (lab/topology.py broker_image).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.model.axes import AXES
from orchestrator.model.brokers import BrokerBuild, broker_of


@dataclass(frozen=True)
class Subscription:
    qos: int = AXES["qos"].default
    mqtt: str = AXES["mqtt"].default
    session: str = AXES["session"].default
    session_expiry_s: int = AXES["session_expiry_s"].default
    transport: str = AXES["transport"].default
    broker: str = AXES["broker"].default  # which broker build the lab runs (model/brokers.py broker_of); no flag

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Subscription:
        """From a run's axis values (RunSpec.values()); an axis missing takes the table's default."""
        return cls(**{k: values.get(k, AXES[k].default) for k in ("qos", "mqtt", "session", "session_expiry_s",
                                                                   "transport", "broker")})

    def argv(self) -> list[str]:
        """The subscriber's (orchestrator/clients/subscriber.py) flags for this subscription."""
        args = ["--qos", str(self.qos)]
        if self.mqtt != AXES["mqtt"].default:
            args += ["--mqtt", self.mqtt]
        if self.session != AXES["session"].default:
            args += ["--session", self.session]
            if self.mqtt == "5":
                args += ["--session-expiry-s", str(self.session_expiry_s)]
        if self.transport != AXES["transport"].default:
            args += ["--transport", self.transport]
        return args

    @property
    def websocket(self) -> bool:
        return self.transport == "websocket"

    @property
    def build(self) -> BrokerBuild:
        """The broker build of the lab (model/brokers.py broker_of)."""
        return broker_of({"transport": self.transport, "broker": self.broker})


AT_QOS0 = Subscription()  # the table's defaults: QoS 0, MQTT 3.1.1, a clean session (`testbed up`, tests)
