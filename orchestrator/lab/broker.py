"""The broker of a cell behind one interface: its configuration in the run folder, how its readiness is known,
the process whose CPU and memory a cell measures, and the restart of that process inside its running container
(restart_process: a sweep's kept-up lab between two cells, an --events broker-restart). Mosquitto today
(images/broker, lab/brokerconf.py renders its files); a second broker is a second implementation of Broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from orchestrator.backends import compose, docker
from orchestrator.backends.process import run
from orchestrator.errors import TestbedError, ToolError
from orchestrator.lab.brokerconf import render_acl, render_mosquitto_conf, render_openssl_conf
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import Scenario
from orchestrator.results.atomic import write_text_atomic


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

    def restart_process(self, *, kill: bool = False, timeout_s: float = 25.0) -> None: ...  # same container


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

    def restart_process(self, *, kill: bool = False, timeout_s: float = 25.0) -> None:
        """End the broker process (SIGTERM; SIGKILL with ``kill``, as a crash) and return once a new one listens,
        in the same container (images/broker/restart.sh): its network namespace, and the capture sharing it, stay
        up; its sessions, retained messages, queues and TLS session cache (IDs and ticket keys) are new."""
        argv = docker.exec_argv(self.container(), "/usr/local/bin/testbed-broker-restart",
                                *(["--kill"] if kill else []))
        try:
            run(argv, timeout=timeout_s)
        except ToolError as exc:
            raise TestbedError(f"the broker process did not restart: {exc.message}", evidence=exc.evidence) from exc


BROKER: Broker = Mosquitto()
