"""exchanges.csv and metrics.json ``exchanges`` of a cell: each message's whole exchange as the capture shows it
(analysis/exchange.py; its packets read in the run's one export pass), with the device's time to PUBACK / PUBCOMP
from its send log beside the capture's. Every cell has one: QoS 1 and 2 have acknowledgements to pair, MQTT 5 its
own PUBLISH, and QoS 0 over 3.1.1 is the exchange of the PUBLISH alone, both ways - the baseline the others are set
against (the report's MQTT 5 saving at QoS 0, one table for a sweep's QoS levels). A fleet's rows are per PUBLISH
too; their seq repeats across its devices (per_message.csv keys them by device)."""

from __future__ import annotations

from typing import Any

from orchestrator.analysis import exchange
from orchestrator.analysis.csvout import csv_chunks
from orchestrator.analysis.logs import read_publisher_acks
from orchestrator.analysis.memory import give_back_freed_memory
from orchestrator.analysis.pipeline import RunAnalysis
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import write_chunks_atomic


def write_exchanges(analysis: RunAnalysis, lay: Layout) -> dict[str, Any]:
    """exchanges.csv written; metrics.json ``exchanges`` returned. The MQTT packets' memory is given back."""
    table = exchange.exchanges(analysis.mqtt_packets)
    acks = read_publisher_acks(lay.publisher_log) if lay.publisher_log.exists() else None
    table = exchange.with_device_acks(table, acks)
    write_chunks_atomic(lay.exchanges, csv_chunks(table))  # pandas' bytes, column-wise (analysis/csvout.py)
    block = exchange.summary(table)
    ack_ms = table["ack_ms_device"].dropna()
    block["median_ack_ms_device"] = float(ack_ms.median()) if len(ack_ms) else None
    analysis.mqtt_packets = exchange.ExchangePackets()  # their memory back before the tables are written
    give_back_freed_memory()
    return block
