"""The broker of a cell behind one interface: its configuration in the run folder, how its readiness is known,
the process whose CPU and memory a cell measures, and the restart of that process inside its running container
(restart_process: a sweep's kept-up lab between two cells, an --events broker-restart). Mosquitto (images/broker and
images/broker-mosquitto-2.0.21, lab/brokerconf.py renders its files) and RabbitMQ (images/broker-rabbitmq,
lab/rabbitmqconf.py): ``broker_for`` the cell's build (model/brokers.py). Both images keep one contract: the compose
service ``broker``, the same health check (the scenario's port listens) and restart command
(/usr/local/bin/testbed-broker-restart, which waits for the new process's listener itself: up to 20 s for
Mosquitto, 90 s for a RabbitMQ node, which takes seconds to boot), so what measures or restarts the broker
(``BROKER``) is the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from orchestrator.backends import compose, docker
from orchestrator.backends.process import run
from orchestrator.errors import TestbedError, ToolError
from orchestrator.lab.brokerconf import render_acl, render_mosquitto_conf, render_openssl_conf
from orchestrator.lab.rabbitmqconf import render_rabbitmq_conf
from orchestrator.model.brokers import BrokerBuild
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import Scenario
from orchestrator.results.atomic import write_text_atomic

RESTART_TIMEOUT_S = 100.0  # the restart command's own bound (20 s Mosquitto, 90 s RabbitMQ) and a margin


class Broker(Protocol):
    @property
    def name(self) -> str: ...  # its package, as the manifest records its version

    @property
    def service(self) -> str: ...  # the compose service it runs in

    @property
    def healthcheck(self) -> str: ...  # what says it is ready (backends/compose.py up waits for it)

    def write_config(self, lay: Layout, scenario: Scenario, *, topic: str, acl: bool,
                     websocket: bool = False) -> None: ...  # config/

    def container(self) -> str: ...  # the container whose main process is measured (CPU, memory, open files)

    def restart_process(self, *, kill: bool = False, timeout_s: float = RESTART_TIMEOUT_S) -> None: ...  # in place



@dataclass(frozen=True)
class Mosquitto:
    name: str = "mosquitto"
    service: str = "broker"
    healthcheck: str = "images/broker/healthcheck.sh"

    def write_config(self, lay: Layout, scenario: Scenario, *, topic: str, acl: bool, websocket: bool = False) -> None:
        """config/mosquitto.conf (its listener ``protocol websockets`` with ``websocket``); config/acl when only the
        run's publisher may write ``topic`` (a broker reachable beyond loopback); config/openssl.cnf when the scenario
        needs one. A file the scenario does not need goes."""
        (lay.config / "mosquitto.conf").write_text(render_mosquitto_conf(scenario, acl=acl, websocket=websocket))
        acl_path = lay.config / "acl"
        if acl:
            write_text_atomic(acl_path, render_acl(topic))
        elif acl_path.exists():
            acl_path.unlink()
        ossl = render_openssl_conf(scenario)
        ossl_path = lay.config / "openssl.cnf"
        if ossl:
            ossl_path.write_text(ossl)
        elif ossl_path.exists():
            ossl_path.unlink()

    def container(self) -> str:
        return compose.container_name(self.service)

    def restart_process(self, *, kill: bool = False, timeout_s: float = RESTART_TIMEOUT_S) -> None:
        """End the broker process (SIGTERM; SIGKILL with ``kill``, as a crash) and return once a new one listens,
        in the same container (images/broker/restart.sh): its network namespace, and the capture sharing it, stay
        up; its sessions, retained messages, queues and TLS session cache (IDs and ticket keys) are new."""
        argv = docker.exec_argv(self.container(), "/usr/local/bin/testbed-broker-restart",
                                *(["--kill"] if kill else []))
        try:
            run(argv, timeout=timeout_s)
        except ToolError as exc:
            raise TestbedError(f"the broker process did not restart: {exc.message}", evidence=exc.evidence) from exc


@dataclass(frozen=True)
class RabbitMQ(Mosquitto):
    """RabbitMQ 4.0.5 and its MQTT plugin (images/broker-rabbitmq): measured and restarted as Mosquitto is (the image
    keeps the contract), its configuration its own."""

    name: str = "rabbitmq-server"

    def write_config(self, lay: Layout, scenario: Scenario, *, topic: str, acl: bool, websocket: bool = False) -> None:
        """config/rabbitmq.conf (rules refuse what it cannot express before this: a board's ACL, WebSocket)."""
        assert not acl and not websocket  # model/rules.py: rabbitmq-board-acl-not-written, websocket-needs-...
        (lay.config / "rabbitmq.conf").write_text(render_rabbitmq_conf(scenario))


BROKER: Broker = Mosquitto()


def broker_for(build: BrokerBuild | None) -> Broker:
    """The implementation of a cell's broker build (None: the default, Mosquitto)."""
    return RabbitMQ() if build is not None and build.implementation == "rabbitmq" else BROKER
