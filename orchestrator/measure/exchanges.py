"""exchanges.csv and metrics.json ``exchanges`` of a cell (wanted: which): each message's whole exchange as the
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
    """Every cell: QoS 1 and 2 have acknowledgements to pair, MQTT 5 its own PUBLISH, and QoS 0 over 3.1.1 is the
    exchange of the PUBLISH alone, both ways - the baseline the others are set against (the report's MQTT 5 saving
    at QoS 0, one table for a sweep's QoS levels), for one more export pass of the capture (0.4 s for 200
    messages). A fleet's rows are per PUBLISH too; their seq repeats across its devices (per_message.csv keys them
    by device)."""
    del spec  # every cell's: kept as the one place that says which
    return True


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
