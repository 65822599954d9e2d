"""How a run's messages are keyed, and what that changes in its analysis: one device (a message is its seq; one
send log, publisher.csv) or a fleet (a message is (device, seq); a send log per device in logs/fleet, the metrics'
``fleet`` block and devices.csv).

The run's publisher variant builds its keying (orchestrator/publishers/variants.py, ``Variant.keying``) and the
analysis asks it (analysis/pipeline.py, runanalysis/analyse.py) instead of asking whether the run was a fleet. A caller
that describes a run by its figures alone (a bench, a test) takes :func:`keying_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from orchestrator.analysis import fleet, fleetbroker, fleethosts, fleetlag, metrics
from orchestrator.analysis.logs import LogTable, read_fleet_logs, read_publisher_log
from orchestrator.analysis.messages import FLEET_KEY, SEQ_KEY
from orchestrator.errors import TestbedError
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import read_json, write_text_atomic

Series = list[list[float]]


class Analysed(Protocol):
    """What a keying adds its tables to (analysis/pipeline.py's RunAnalysis)."""

    per_packet: pd.DataFrame
    per_message: pd.DataFrame
    metrics: dict[str, Any]
    warnings: list[str]
    send_log: pd.DataFrame | None


class Keying(Protocol):
    @property
    def devices(self) -> int: ...
    @property
    def fleet_dir(self) -> Path | None: ...  # a fleet's send logs, <device>.csv
    @property
    def keys(self) -> tuple[str, ...]: ...  # a message's key columns
    @property
    def matched_by(self) -> str: ...  # how the capture's PUBLISH are matched to the logs (decoded)
    @property
    def connections_by(self) -> str | None: ...  # the connections table's column naming a connection's device

    def classic_log(self, path: Path) -> Path | None: ...  # publisher.csv, when this keying reads it
    def read_send_log(self, publisher_log: Path | None) -> LogTable | None: ...
    def refused(self, name: str, log: pd.DataFrame | None) -> str | None: ...  # why a log is not used
    def without_keylog(self, pcap: Path) -> None: ...  # raises when order cannot stand in for the key
    def jitter(self, pm: pd.DataFrame) -> dict[str, Any]: ...
    def loss(self, sub_log: pd.DataFrame | None, samples: int, outbound: pd.DataFrame) -> dict[str, Any]: ...
    def logged(self, pub_log: pd.DataFrame | None) -> int | None: ...  # messages the send log(s) name
    def unique(self, frame: pd.DataFrame) -> int: ...  # distinct messages in ``frame``
    def inputs_block(self, samples: int) -> dict[str, Any]: ...  # what metrics.json ``inputs`` adds
    def add_tables(self, analysis: Analysed, lay: Layout, samples: int, res: dict[str, Any],
                   cpu: dict[str, Series | None], memory: dict[str, Series | None],
                   summary: dict[str, Any]) -> dict[str, Any]: ...  # the publisher's summary


@dataclass(frozen=True)
class OneDevice:
    """One publisher: a message is its seq, its send log publisher.csv."""

    devices: int = 1
    connections_by: str | None = None  # every connection is the one device's
    fleet_dir: Path | None = None
    keys: tuple[str, ...] = SEQ_KEY
    matched_by: str = "decoded sequence number"

    def classic_log(self, path: Path) -> Path | None:
        return path if path.exists() else None

    def read_send_log(self, publisher_log: Path | None) -> LogTable | None:
        return read_publisher_log(publisher_log) if publisher_log is not None else None

    def refused(self, name: str, log: pd.DataFrame | None) -> str | None:
        return None

    def without_keylog(self, pcap: Path) -> None:
        return None

    def jitter(self, pm: pd.DataFrame) -> dict[str, Any]:
        return metrics.jitter(pm)

    def loss(self, sub_log: pd.DataFrame | None, samples: int, outbound: pd.DataFrame) -> dict[str, Any]:
        return metrics.loss(sub_log, samples, out_seqs=outbound["seq"])

    def logged(self, pub_log: pd.DataFrame | None) -> int | None:
        return int(len(pub_log)) if pub_log is not None else None

    def unique(self, frame: pd.DataFrame) -> int:
        return int(frame["seq"].nunique()) if len(frame) else 0

    def inputs_block(self, samples: int) -> dict[str, Any]:
        return {}

    def add_tables(self, analysis: Analysed, lay: Layout, samples: int, res: dict[str, Any],
                   cpu: dict[str, Series | None], memory: dict[str, Series | None],
                   summary: dict[str, Any]) -> dict[str, Any]:
        return summary


@dataclass(frozen=True)
class DeviceFleet:
    """``devices`` virtual devices (the fleet): a message is (device, seq), the send logs are the per-device
    CSVs in ``fleet_dir`` (logs/fleet), and a log that names no device is not used."""

    devices: int
    fleet_dir: Path | None = None
    keys: tuple[str, ...] = FLEET_KEY
    matched_by: str = "decoded device id and sequence number"
    connections_by: str | None = "client_id"  # each device's CONNECT carries its id as the client id

    def classic_log(self, path: Path) -> Path | None:
        return None

    def read_send_log(self, publisher_log: Path | None) -> LogTable | None:
        if self.fleet_dir is not None:
            return read_fleet_logs(self.fleet_dir)
        return OneDevice().read_send_log(publisher_log)

    def refused(self, name: str, log: pd.DataFrame | None) -> str | None:
        if log is None or "device" in log.columns:
            return None
        return f"the {name} log of this fleet run names no device: not used (a fleet's messages are keyed by " \
               "device and seq)"

    def without_keylog(self, pcap: Path) -> None:
        raise TestbedError(f"no key log decrypts {pcap.name}: a fleet's messages are matched by the device id "
                           "inside their payload", hint="the fleet's key log (keylogs/) is missing or from "
                                                        "another run")

    def jitter(self, pm: pd.DataFrame) -> dict[str, Any]:
        return metrics.jitter(pm, by="device")

    def loss(self, sub_log: pd.DataFrame | None, samples: int, outbound: pd.DataFrame) -> dict[str, Any]:
        return metrics.fleet_loss(sub_log, samples, self.devices, out_keys=outbound[list(FLEET_KEY)])

    def logged(self, pub_log: pd.DataFrame | None) -> int | None:
        return self.unique(pub_log) if pub_log is not None else None

    def unique(self, frame: pd.DataFrame) -> int:
        return int(len(frame[list(self.keys)].dropna().drop_duplicates())) if len(frame) else 0

    def inputs_block(self, samples: int) -> dict[str, Any]:
        return {"devices": self.devices, "messages_expected": samples * self.devices,
                "fleet_dir": self.fleet_dir.name if self.fleet_dir else None}

    def add_tables(self, analysis: Analysed, lay: Layout, samples: int, res: dict[str, Any],
                   cpu: dict[str, Series | None], memory: dict[str, Series | None],
                   summary: dict[str, Any]) -> dict[str, Any]:
        """devices.csv and metrics.json ``fleet`` (analysis/fleet.py; the broker's cost: analysis/fleetbroker.py).
        Returns the loader's own summary (logs/fleet/summary.json) for the resources block."""
        hosts = fleethosts.read_hosts(lay.fleet_hosts)  # a fleet over several lab hosts: each device's host
        connections = fleethosts.with_hosts(fleet.read_connections(lay.fleet_dir / fleet.CONNECTIONS), hosts)
        loader = read_json(lay.fleet_dir / fleet.SUMMARY)
        if hosts:  # the per-message table (per_message.csv) and the send log carry the ``host`` column
            analysis.per_message = fleethosts.with_hosts(analysis.per_message, hosts)
            analysis.send_log = fleethosts.with_hosts(analysis.send_log, hosts)
        pm = analysis.per_message
        block = fleet.fleet_block(pm, analysis.send_log, connections, loader, devices=self.devices,
                                  samples=samples,
                                  delay_available=bool((analysis.metrics.get("delay_ms") or {}).get("available")),
                                  opens=fleet.read_opens(lay.publisher_connections),
                                  outages=fleetlag.outages_of(analysis.metrics.get("events")))
        ph = fleetbroker.phases(analysis.per_packet, pm, connections)
        arrivals = pm["broker_in_us"].dropna().to_numpy(dtype=float) / 1e6
        block["broker"] = fleetbroker.broker_block(cpu, memory, ph, arrivals, int(block["connected"] or 0),
                                                   res.get("host_cpus"))
        per_msg = block["broker"]["per_message"].get("cpu_ms_per_event")
        block["cpu"] = {"loader_cpu_s": block["loader"]["cpu_s"],
                        "loader_us_per_message": loader.get("cpu_us_per_message"),
                        "broker_cpu_s": res.get("broker_cpu_s"), "broker_cpu_source": block["broker"]["cpu_source"],
                        "broker_us_per_message": round(per_msg * 1000, 3) if per_msg is not None else None,
                        "host_cpus": res.get("host_cpus")}
        block["limited"] = fleetlag.limited(block)
        table = fleet.device_table(pm, analysis.send_log, connections)
        if hosts:
            block["hosts"] = fleethosts.hosts_block(pm, analysis.send_log, hosts, samples)
            table = fleethosts.with_hosts(table, hosts)
        write_text_atomic(lay.devices, table.to_csv(index=False))
        analysis.metrics["fleet"] = block
        events = analysis.metrics.get("events")
        if isinstance(events, dict):  # its recovery figures came from a loader that may have fallen behind
            events["loader_limited"] = block["limited"]["loader"]
        warnings = fleet.warnings(block)
        analysis.warnings.extend(warnings)
        if analysis.metrics.get("warnings") is not analysis.warnings:
            analysis.metrics.setdefault("warnings", []).extend(warnings)
        return loader


ONE_DEVICE = OneDevice()


def keying_for(devices: int, fleet_dir: Path | None = None) -> Keying:
    """The keying of a run told by its figures (a bench, a test): a fleet when more than one device publishes or
    its send-log folder is given. A run of this tool takes its publisher variant's (``Variant.keying``)."""
    return DeviceFleet(devices, fleet_dir) if devices > 1 or fleet_dir is not None else ONE_DEVICE
