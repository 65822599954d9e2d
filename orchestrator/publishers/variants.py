"""A cell's publisher variant, chosen once from the run's spec (variant_for): the virtual device, a fleet of them,
or a board over its serial port.

Each variant says what it checks before anything starts, where an impairment acts on its path, how it is placed
and started for the cell, what it adds to the cell's record, and when its run ended early. The cell's lifecycle
(orchestrator/measure/) is written against this interface and never asks which variant it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from orchestrator.analysis.keying import ONE_DEVICE, DeviceFleet, Keying
from orchestrator.backends import compose
from orchestrator.backends.compose import Topology
from orchestrator.backends.impairment import resolve_mechanism, router
from orchestrator.backends.impairment.board import board_mechanism, check_board_profile
from orchestrator.lab.board_side import Exposure, board_exposure, lab_address, start_time_echo
from orchestrator.lab.pki import Pki
from orchestrator.model.impairment import Impairment
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.publishers import Publisher, fleet
from orchestrator.publishers.board.publisher import LINKS, BoardPublisher
from orchestrator.publishers.virtual import VirtualPublisher
from orchestrator.results.atomic import read_json


class Variant(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def board_path(self) -> bool: ...  # an impairment acts on the board's packets at the broker's ingress

    @property
    def fresh_lab_reason(self) -> str | None: ...  # why its cells cannot share a block's kept-up lab (None: can)

    @property
    def dealt_over_hosts(self) -> bool: ...  # its devices are dealt over a lab's publisher hosts (else: the first)


    def check(self, spec: RunSpec) -> None: ...  # before the impairment profile is read
    def mechanism_to_check(self, impairment: Impairment, spec: RunSpec) -> str: ...  # the delay mechanism it will use
    def exposure(self, scenario: Scenario, spec: RunSpec,
                 topic: str) -> Exposure | None: ...  # the broker published beyond loopback
    def mechanism(self, impairment: Impairment, spec: RunSpec) -> str | None: ...  # as the cell applies it
    def place(self, scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, topo: Topology,
              mechanism: str | None, exposure: Exposure | None) -> tuple[Topology, Publisher]: ...
    def with_broker_up(self, spec: RunSpec) -> dict[str, Any]: ...  # cell.json fields, checked on the running broker
    def what(self, spec: RunSpec, rate: bool = True) -> str: ...  # "" or how many publish ("from each of N devices")
    def recorded(self, lay: Layout) -> dict[str, Any]: ...  # cell.json fields once the cell ran
    def ended_early(self, publisher: Publisher) -> bool: ...  # its run ended before every message was counted
    def keying(self, spec: RunSpec, lay: Layout) -> Keying: ...  # how the analysis keys its messages
    def device_folders(self, lay: Layout) -> tuple[Path, ...]: ...  # where its program writes beyond logs/


@dataclass(frozen=True)
class VirtualDevice:
    """The vdevice container (publishers/virtual.py); behind the router for the userspace delay line."""

    name: str = "virtual"
    board_path: bool = False
    dealt_over_hosts: bool = False  # one device: a lab's first publisher host
    fresh_lab_reason: str | None = None  # a new publisher program per cell, in the block's kept-up publisher container

    def check(self, spec: RunSpec) -> None:
        return None

    def mechanism_to_check(self, impairment: Impairment, spec: RunSpec) -> str:
        return spec.delay_mechanism

    def exposure(self, scenario: Scenario, spec: RunSpec, topic: str) -> Exposure | None:
        return None

    def mechanism(self, impairment: Impairment, spec: RunSpec) -> str | None:
        return resolve_mechanism(impairment, spec.delay_mechanism)

    def place(self, scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, topo: Topology,
              mechanism: str | None, exposure: Exposure | None) -> tuple[Topology, Publisher]:
        topo, host = place_publisher(topo, mechanism)
        return topo, VirtualPublisher(scenario, lay, pki, spec, host=host, kept=topo.kept)

    def with_broker_up(self, spec: RunSpec) -> dict[str, Any]:
        return {}

    def what(self, spec: RunSpec, rate: bool = True) -> str:
        return ""

    def recorded(self, lay: Layout) -> dict[str, Any]:
        """The device's TLS library as the device names it (its summary's tls_library, its banner's) and the TLS 1.3
        record padding granularity its build has (tls13_padding_granularity; null without TLS 1.3)."""
        summary = read_json(lay.fleet_dir / "summary.json" if self.name == "fleet" else lay.publisher_summary) or {}
        return {"device": {"tls_library": summary.get("tls_library"),
                           "tls13_padding_granularity": summary.get("tls13_padding_granularity")}}

    def ended_early(self, publisher: Publisher) -> bool:
        return False

    def keying(self, spec: RunSpec, lay: Layout) -> Keying:
        return ONE_DEVICE

    def device_folders(self, lay: Layout) -> tuple[Path, ...]:
        return ()


@dataclass(frozen=True)
class Fleet(VirtualDevice):
    """N virtual devices in the publisher container (the fleet binary): one descriptor each, in it and in the
    broker (publishers/fleet.py checks both limits)."""

    name: str = "fleet"
    dealt_over_hosts: bool = True  # a lab's publisher hosts each run a share (orchestrator/model/shares.py)

    def check(self, spec: RunSpec) -> None:
        fleet.check_planned(spec)

    def with_broker_up(self, spec: RunSpec) -> dict[str, Any]:
        return {"broker_nofile": fleet.check_broker(spec)}

    def what(self, spec: RunSpec, rate: bool = True) -> str:
        return f" from each of {spec.devices} devices" + (f" at {spec.connect_rate:g}/s" if rate else "")

    def keying(self, spec: RunSpec, lay: Layout) -> Keying:
        """(device, seq), the send logs in logs/fleet (when the run wrote them), devices.csv, the fleet block."""
        return DeviceFleet(spec.devices, lay.fleet_dir if lay.fleet_dir.is_dir() else None)

    def device_folders(self, lay: Layout) -> tuple[Path, ...]:
        return (lay.fleet_dir,)  # its device logs (on a lab host: made before the fleet starts)


@dataclass(frozen=True)
class Board:
    """A board over its serial port (publishers/board/): the broker published on the board's address with
    authentication, the impairment at the broker's ingress, the time-echo service for its clock."""

    name: str = "board"
    board_path: bool = True
    dealt_over_hosts: bool = False
    # its lab is published on the board's address with its own exposure and time echo, and the board reconnects
    # on its own schedule: a broker restarted under it has not been shown sound, so each cell has a fresh lab
    fresh_lab_reason: str | None = "a board's cell brings a fresh lab up for its exposure and the board's clock"

    def check(self, spec: RunSpec) -> None:
        """The serial port opened and the board's BANNER and READY read now, before any container starts: a port
        that is not there, a board of another protocol or a silent one is refused first. The cells use this link.
        Before it, the address the board reaches (--board-host: an interface's, never a wildcard)."""
        lab_address(spec.board_host)
        assert spec.serial_port is not None  # RunSpec requires it for the board
        LINKS.get(spec.serial_port, spec.baud)

    def mechanism_to_check(self, impairment: Impairment, spec: RunSpec) -> str:
        check_board_profile(impairment, spec.delay_mechanism)
        return board_mechanism(impairment) or spec.delay_mechanism

    def exposure(self, scenario: Scenario, spec: RunSpec, topic: str) -> Exposure | None:
        return board_exposure(scenario, spec.board_host, topic)

    def mechanism(self, impairment: Impairment, spec: RunSpec) -> str | None:
        return board_mechanism(impairment)

    def place(self, scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, topo: Topology,
              mechanism: str | None, exposure: Exposure | None) -> tuple[Topology, Publisher]:
        assert exposure is not None  # exposure() always gives one
        return topo, board_publisher(exposure.scenario, lay, pki, spec, topo)

    def with_broker_up(self, spec: RunSpec) -> dict[str, Any]:
        return {}

    def what(self, spec: RunSpec, rate: bool = True) -> str:
        return ""

    def recorded(self, lay: Layout) -> dict[str, Any]:
        """The board's banner (chip, MAC, firmware, versions, CPU, power save, crypto in hardware)."""
        return {"board": (read_json(lay.publisher_summary) or {}).get("board")}

    def ended_early(self, publisher: Publisher) -> bool:
        return publisher.wait_exit(0) == 1

    def keying(self, spec: RunSpec, lay: Layout) -> Keying:
        return ONE_DEVICE

    def device_folders(self, lay: Layout) -> tuple[Path, ...]:
        return ()


VIRTUAL, FLEET, BOARD = VirtualDevice(), Fleet(), Board()
BY_PUBLISHER: dict[str, Callable[[RunSpec], Variant]] = {
    "virtual": lambda spec: FLEET if spec.is_fleet else VIRTUAL,
    "esp32": lambda spec: BOARD,
}


def variant_for(spec: RunSpec) -> Variant:
    """The one place a run's publisher variant is chosen."""
    return BY_PUBLISHER[spec.publisher](spec)


def place_publisher(topo: Topology, mechanism: str | None) -> tuple[Topology, str]:
    """Where the virtual device sits and what it connects to: the lab network and `broker`, or, for the
    userspace delay line, behind the router (network uplink) to the broker's lab address."""
    if mechanism != "queue":
        return topo, "broker"
    topo = replace(topo, publisher_network="uplink")
    compose.start_service(topo, compose.ROUTER)
    return topo, router.broker_address(compose.container_name("broker"))


def board_publisher(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, topo: Topology) -> BoardPublisher:
    """The board as this cell's publisher: the broker and the time-echo service on the lab host's address,
    the only one they are published on."""
    address = topo.bind
    sync_port = start_time_echo(topo, address)
    return BoardPublisher(scenario, lay, pki, spec, broker_host=address, broker_port=topo.host_port,
                          sync=(address, sync_port))
