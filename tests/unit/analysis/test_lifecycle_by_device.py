"""A fleet's connections (analysis/lifecycle.py with the fleet's keying): each connection's device from the client
id of its CONNECT, numbered among its device's, "after the first" meaning after each device's own first, and the
fleet's claims (device, conn, ...) matched by device and number whatever their order."""

from __future__ import annotations

import pandas as pd

from orchestrator.analysis import lifecycle
from orchestrator.analysis.keying import ONE_DEVICE, DeviceFleet

DEVICES, CONNS = ("f0000", "f0001", "f0002"), 3


def _rows() -> pd.DataFrame:
    """Three devices' connections interleaved in SYN order: each device's first full, the later ones resumed."""
    rows = []
    for c in range(CONNS):
        for i, d in enumerate(DEVICES):
            rows.append({"stream": len(rows), "client_id": d, "syn_time": 100.0 + c * 2 + i * 0.1,
                         "handshake": "full" if c == 0 else "resumed-ticket",
                         "wire_client_to_server": 600 - 300 * (c > 0),
                         "wire_server_to_client": 1400 - 1000 * (c > 0), "tcp_end": "FIN client",
                         "syn_to_first_publish_ms": 20.0, "tcp_connect_ms": 0.1, "tls_handshake_ms": 5.0,
                         "mqtt_connect_ms": 1.0})
    return pd.DataFrame(rows)


def _claims(lie: tuple[str, int] | None = None) -> pd.DataFrame:
    claims = [{"device": d, "conn": c, "resumed": 0 if c == 0 else 1} for d in reversed(DEVICES) for c in range(CONNS)]
    for row in claims:
        if lie == (row["device"], row["conn"]):
            row["resumed"] = 1 - row["resumed"]
    return pd.DataFrame(claims)


def _block(rows: pd.DataFrame, mismatches: list) -> dict:
    return lifecycle.lifecycle(rows, mismatches, mode="resume-ticket", per_connection=3, close="disconnect",
                               expected=len(DEVICES) * CONNS, readings=27, tls=True)


def test_each_device_is_counted_on_its_own() -> None:
    rows, mismatches = lifecycle.with_claims(_rows(), _claims(), DeviceFleet(3).connections_by)
    assert list(rows["device"]) == [d for _ in range(CONNS) for d in DEVICES]
    assert list(rows["device_conn"]) == [c for c in range(CONNS) for _ in DEVICES]
    block = _block(rows, mismatches)
    assert block["devices"] == 3 and block["reconnections"] == 6 and block["resumed_after_first"] == 6
    assert block["verdict"] == "every reconnection resumed"
    assert block["client_claims"] == {"compared": 9, "mismatches": []}


def test_a_lying_device_is_named() -> None:
    rows, mismatches = lifecycle.with_claims(_rows(), _claims(lie=("f0001", 2)), DeviceFleet(3).connections_by)
    assert mismatches == [{"connection": 8, "client_says": "full", "wire": "resumed-ticket", "device": "f0001"}]
    assert lifecycle.mismatch_warnings(_block(rows, mismatches)) == [
        "connection 8 (f0001): the publisher says full, the wire shows resumed-ticket"]


def test_one_device_keying_takes_every_connection_as_its_own() -> None:
    """The single device's reading, unchanged: after ITS first connection, the two full ones of the others count as
    reconnections that were not resumed."""
    rows, _ = lifecycle.with_claims(_rows(), None, ONE_DEVICE.connections_by)
    block = _block(rows, [])
    assert block["devices"] == 1 and block["reconnections"] == 8 and block["resumed_after_first"] == 6
    assert block["verdict"] == "2 of 8 reconnections were full handshakes on the wire"


def test_a_connection_cut_before_its_connect_is_unattributed() -> None:
    """A fleet whose broker restarted: a SYN refused (no byte from the client, no handshake) names no device; the
    others keep theirs and their numbers."""
    table = _rows()
    table.loc[4, ["client_id", "handshake", "payload_client_to_server"]] = [None, "unknown", 0]
    rows, _ = lifecycle.with_claims(table, None, "client_id")
    assert rows.loc[4, "device"] == lifecycle.UNATTRIBUTED
    assert set(rows["device"]) - {lifecycle.UNATTRIBUTED} == set(_rows()["client_id"].drop(index=4))
    assert _block(rows, [])["devices"] == len(DEVICES)  # the refused SYN is no device's


def test_a_handshake_the_broker_never_finished_is_unattributed_and_the_claims_still_compare() -> None:
    """CI stop 46: a broker restarted between its flight (which tells the wire the handshake's kind) and the
    client's Finished. That connection never carried a CONNECT (the device does not number it either), so it is
    no device's; before, the one row without a client id made the whole fleet one device and every per-device
    figure of the events (reconnected, first after, the claims compared) came out empty."""
    table = _rows()
    table["tls_version"] = "TLS 1.2"
    table["tls_finished_from"] = "decrypted Finished"
    table["payload_client_to_server"] = 600
    cut = pd.DataFrame([{**table.iloc[4].to_dict(), "stream": 99, "client_id": None, "handshake": "full",
                         "tls_finished_from": None, "syn_time": 102.15}])
    table = pd.concat([table, cut], ignore_index=True).sort_values("syn_time", ignore_index=True)
    rows, mismatches = lifecycle.with_claims(table, _claims(), "client_id")
    assert list(rows.loc[rows["stream"] == 99, "device"]) == [lifecycle.UNATTRIBUTED]
    assert mismatches == [] and _block(rows, mismatches)["client_claims"]["compared"] == len(DEVICES) * CONNS
    finished = table.copy()
    finished.loc[finished["stream"] == 99, "tls_finished_from"] = "decrypted Finished"  # finished, yet no CONNECT
    rows, _ = lifecycle.with_claims(finished, _claims(), "client_id")
    assert set(rows["device"]) == {""}  # not told apart: and said so
    assert lifecycle.attribution_warnings(rows, "client_id") == [
        "1 of 10 connections carry no client id, and one that finished its handshake among them (no key for "
        "it?): the fleet's connections are counted as one device's"]
    assert lifecycle.attribution_warnings(lifecycle.with_claims(table, None, "client_id")[0], "client_id") == []


def test_a_connection_without_a_client_id_makes_it_one_device() -> None:
    table = _rows()
    table.loc[4, "client_id"] = None  # not decrypted
    rows, _ = lifecycle.with_claims(table, None, "client_id")
    assert set(rows["device"]) == {""} and _block(rows, [])["devices"] == 1
    rows, mismatches = lifecycle.with_claims(table, _claims(), "client_id")  # a fleet's claims cannot be placed
    assert mismatches == [] and _block(rows, mismatches)["client_claims"]["compared"] == 0
