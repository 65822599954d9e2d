"""exchanges.csv and metrics.json ``exchanges`` of a QoS 1/2 or MQTT 5 cell: each message's whole exchange as the
capture shows it (analysis/exchange.py, its own export pass), with the device's time to PUBACK / PUBCOMP from
its send log beside the capture's."""

from __future__ import annotations

from pathlib import Path

from orchestrator.analysis import exchange
from orchestrator.analysis.logs import read_publisher_acks
from orchestrator.analysis.pipeline import RunAnalysis
from orchestrator.backends.tshark import export_chunks
from orchestrator.model.export import ExportRequest
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario


def wanted(spec: RunSpec) -> bool:
    """QoS 1 and 2 have acknowledgements to pair, MQTT 5 its own PUBLISH; QoS 0 over 3.1.1 is per_message.csv."""
    return spec.qos > 0 or spec.values().get("mqtt", "3.1.1") != "3.1.1"


def add_exchanges(analysis: RunAnalysis, lay: Layout, scenario: Scenario, keylogs: list[Path]) -> None:
    parts: list[str] = []
    request = exchange.exchange_request(ExportRequest(lay.capture, scenario.port, scenario.is_tls, tuple(keylogs)))
    outcome = export_chunks(request, parts.append)
    if outcome.returncode != 0 and not parts:
        raise outcome.error(lay.capture)
    table = exchange.exchanges(exchange.parse_packets("".join(parts), scenario.port))
    acks = read_publisher_acks(lay.publisher_log) if lay.publisher_log.exists() else None
    table = exchange.with_device_acks(table, acks)
    table.to_csv(lay.exchanges, index=False)
    block = exchange.summary(table)
    ack_ms = table["ack_ms_device"].dropna()
    block["median_ack_ms_device"] = float(ack_ms.median()) if len(ack_ms) else None
    analysis.metrics["exchanges"] = block
