"""The publisher's connections of a run (analysis/lifecycle.py) on the recorded Mosquitto fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from orchestrator.analysis import lifecycle
from orchestrator.analysis.connections import connections_table
from orchestrator.backends.tshark import export_chunks

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "connections"


def _rows(case: str) -> tuple[pd.DataFrame, dict]:
    truth = json.loads((FIX / f"{case}.json").read_text())
    table = connections_table(FIX / truth["pcap"], truth["broker_port"], truth["tls"], (FIX / truth["keylog"],),
                              export_chunks)
    return lifecycle.publisher_rows(table, set(table["client_ip"]), set()), truth


def test_resumption_by_id_counted_from_the_wire_and_a_lying_client_is_caught() -> None:
    rows, truth = _rows("t12_session_id")
    assert len(rows) == len(truth["connections"])
    claims = pd.DataFrame({"resumed": ["", 1, 1, 1]})  # the 4th claim is wrong: the wire shows a full handshake
    rows, mismatches = lifecycle.with_claims(rows, claims)
    block = lifecycle.lifecycle(rows, mismatches, mode="resume-id", per_connection=1, close="disconnect",
                                expected=4, readings=4, tls=True)
    assert block["count"] == 4 and block["missing"] == 0
    assert block["handshakes"]["full"] == 2 and block["handshakes"]["resumed-id"] == 2
    assert block["reconnections"] == 3 and block["resumed_after_first"] == 2
    assert block["verdict"] == "1 of 3 reconnections were full handshakes on the wire"
    assert mismatches == [{"connection": 4, "client_says": "resumed", "wire": "full"}]
    assert lifecycle.mismatch_warnings(block) == ["connection 4: the publisher says resumed, the wire shows full"]
    wire = rows["wire_client_to_server"] + rows["wire_server_to_client"]
    assert block["wire_bytes"] == int(wire.sum()) and block["wire_bytes_per_reading"] == round(wire.sum() / 4, 1)
    full, resumed = block["by_kind"]["full"], block["by_kind"]["resumed-id"]
    assert resumed["wire_bytes_median"] < full["wire_bytes_median"]  # no Certificate, no key exchange


def test_tickets_resumed_and_refused_resumption_is_said() -> None:
    rows, _ = _rows("t12_ticket")
    block = lifecycle.lifecycle(*lifecycle.with_claims(rows, None), mode="resume-ticket", per_connection=1,
                                close="disconnect", expected=len(rows), readings=len(rows), tls=True)
    assert block["handshakes"]["resumed-ticket"] >= 1
    full_only = rows.assign(handshake="full")
    block = lifecycle.lifecycle(full_only, [], mode="resume-ticket", per_connection=1, close="disconnect",
                                expected=len(rows), readings=len(rows), tls=True)
    assert block["verdict"].startswith("resumption refused")
    assert lifecycle.lifecycle(full_only, [], mode="reconnect", per_connection=1, close="disconnect",
                               expected=len(rows), readings=len(rows), tls=True)["verdict"] is None


def test_a_subscribers_stream_and_other_addresses_are_not_the_publishers() -> None:
    table = pd.DataFrame({"client_ip": ["10.0.0.2", "10.0.0.3", "10.0.0.2"], "stream": [0, 1, 2],
                          "syn_time": [3.0, 1.0, 2.0]})
    rows = lifecycle.publisher_rows(table, {"10.0.0.2"}, {0})
    assert list(rows["stream"]) == [2]
