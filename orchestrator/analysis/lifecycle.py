"""The publisher's connections of one run (issue 13): how many, how each TLS handshake went ON THE WIRE,
what each cost, and whether the publisher's own claim of resumption agrees.

Input: the per-connection table of the capture (``analysis/connections.py``, every connection to the
broker port), the publisher's addresses (from the packets the analysis put on the publisher->broker
leg) and, when the publisher wrote one, its connections log (``logs/publisher_connections.csv``:
``conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error`` and the device's own handshake
phases after them, ``analysis/device_phases.py``; a fleet's has ``device`` first, its rows in no particular order).

Whose connection: the keying says (``Keying.connections_by``, analysis/keying.py). One device's are all its
own; a fleet's are told apart by the MQTT client id of their CONNECT (the table's ``client_id``, where the
capture was decrypted). ``device_conn`` is the connection's number among its device's (0 = its first, by
SYN), and "after the first" means after each device's own first connection, so a fleet of D devices
resuming has D full handshakes and every other one resumed. A fleet's claims are matched by (device,
connection number); one device's, in order. Where a client id is missing every connection is taken as
one device's.

Output: ``connections.csv`` (the publisher's rows, in SYN order, with the client's claim beside the
wire's verdict) and the ``connections`` block of metrics.json. Per reading: every byte of the
publisher's connections on the wire (all headers, both directions, retransmissions included) divided by
the readings it sent, and the set-up time (first SYN -> first PUBLISH) divided the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis import device_phases

RESUMED = ("resumed-id", "resumed-ticket", "resumed-psk")
KINDS = ("full", *RESUMED, "none", "unknown")
# the split: analysis/handshake_split.py
MEDIANS = ("tcp_connect_ms", "tls_handshake_ms", "mqtt_connect_ms", "syn_to_first_publish_ms", "split_span_ms",
           "split_device_ms", "split_broker_ms", "split_network_ms", "split_held_ms")


def read_claims(path: Path) -> pd.DataFrame | None:
    """The publisher's connections log, or None when it wrote none."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return pd.read_csv(path)


def publisher_rows(table: pd.DataFrame, publisher_ips: Iterable[str], subscriber_streams: Iterable[int]
                   ) -> pd.DataFrame:
    """The publisher's connections: from its addresses, never a subscriber's stream; by first SYN."""
    if table.empty:
        return table
    ips, subs = set(publisher_ips), set(subscriber_streams)
    rows = table[table["client_ip"].isin(ips) & ~table["stream"].isin(subs)]
    return rows.sort_values(["syn_time", "stream"], na_position="last").reset_index(drop=True)


def _claim(value: object) -> bool | None:
    if value is None or (isinstance(value, float) and pd.isna(value)) or str(value).strip() in ("", "-"):
        return None
    return str(value).strip() in ("1", "1.0", "true", "True")


UNATTRIBUTED = "unattributed"  # a connection that could carry no CONNECT: refused, or cut before its handshake ended


def _cut(rows: pd.DataFrame) -> pd.Series:
    """Rows whose connection never got as far as a CONNECT: no byte from the client (a SYN refused while a broker
    restarted), no TLS handshake seen, or a TLS handshake that never finished (the broker gone between its flight
    and the client's Finished: the wire knows the kind from the server's flight, but no Finished pair ended it)."""
    cut = pd.Series(False, index=rows.index)
    if "handshake" in rows:
        cut |= rows["handshake"].astype(str) == "unknown"
    if "tls_version" in rows and "tls_finished_from" in rows:
        cut |= rows["tls_version"].notna() & rows["tls_finished_from"].isna()
    if "payload_client_to_server" in rows:
        cut |= rows["payload_client_to_server"].fillna(0).astype(float) == 0
    return cut


def _clients(rows: pd.DataFrame, by: str | None) -> pd.Series:
    """Each row's device: the column ``by`` where every row has it, or where only connections that never got as far
    as a CONNECT lack it (a fleet's broker restarted: those are UNATTRIBUTED); else (not decrypted) one device for
    all."""
    one = pd.Series([""] * len(rows), index=rows.index, dtype=object)
    if by is None or by not in rows or not len(rows):
        return one
    ids = rows[by]
    present = ids.notna() & (ids.astype(str) != "")
    if bool(present.all()):
        return ids.astype(str)
    if bool(present.any()) and bool(_cut(rows)[~present].all()):
        return ids.astype(str).where(present, UNATTRIBUTED)
    return one


def with_device_numbers(rows: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """``device`` (by ``by``, "" for one device) and ``device_conn``: each connection's number among its
    device's (0: its first, by SYN)."""
    out = rows.copy()
    clients = _clients(out, by)
    out["device"] = clients.to_numpy()
    out["device_conn"] = clients.groupby(clients).cumcount().to_numpy() if len(out) else []
    return out


def _claim_positions(rows: pd.DataFrame, claims: pd.DataFrame) -> list[tuple[int, int]]:
    """(row index, claim's row position) pairs: a fleet's by (device, connection number), one device's in order;
    none for a fleet's claims when the capture does not name the devices (not decrypted)."""
    if "device" in claims:
        if not (rows["device"] != "").all():
            return []
        where = {(c, int(n)): i for i, (c, n) in enumerate(zip(rows["device"], rows["device_conn"], strict=True))}
        return [(where[(str(d), int(n))], j) for j, (d, n) in enumerate(zip(claims["device"], claims["conn"],
                                                                             strict=True)) if (str(d), int(n)) in where]
    return [(i, i) for i in range(min(len(rows), len(claims)))]


def with_claims(rows: pd.DataFrame, claims: pd.DataFrame | None,
                by: str | None = None) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """``device``, ``device_conn`` and ``claimed_resumed`` beside each wire row (a fleet's claim by device and
    number, one device's i-th claim for its i-th connection), the device's own handshake phases against the wire's
    split (analysis/device_phases.py), and where the claim and the wire disagree."""
    out = with_device_numbers(rows, by)
    out["claimed_resumed"] = None
    if claims is None or out.empty:
        return out, []
    mismatches: list[dict[str, Any]] = []
    positions = _claim_positions(out, claims)
    if "device_busy_ms" in claims:
        out = device_phases.with_phases(out, claims, positions)
    for i, j in positions:
        claim = _claim(claims["resumed"].iloc[j])
        out.at[i, "claimed_resumed"] = claim
        wire = str(out.at[i, "handshake"])
        if claim is None or wire in ("none", "unknown"):
            continue
        if claim != (wire in RESUMED):
            said = {"connection": i + 1, "client_says": "resumed" if claim else "full", "wire": wire}
            client = str(out.at[i, "device"])
            mismatches.append({**said, **({"device": client} if client else {})})
    return out, mismatches


def _median(rows: pd.DataFrame, col: str) -> float | None:
    values = pd.to_numeric(rows[col], errors="coerce").dropna() if col in rows else pd.Series(dtype=float)
    return round(float(values.median()), 3) if len(values) else None


def _by_kind(rows: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, part in rows.groupby("handshake", sort=True):
        wire = part["wire_client_to_server"] + part["wire_server_to_client"]
        out[str(kind)] = {"n": int(len(part)), "wire_bytes_median": float(wire.median()),
                          "wire_client_to_server_median": float(part["wire_client_to_server"].median()),
                          "wire_server_to_client_median": float(part["wire_server_to_client"].median()),
                          **{f"{c}_median": _median(part, c) for c in MEDIANS}}
    return out


def _resumption(rows: pd.DataFrame, mode: str, tls: bool) -> dict[str, Any]:
    """After each device's first connection: how many were resumed on the wire, and what that says."""
    numbered = rows if "device_conn" in rows else with_device_numbers(rows)
    numbered = numbered[numbered["device"] != UNATTRIBUTED] if len(rows) else numbered  # no device's connection
    later = numbered.loc[numbered["device_conn"] > 0, "handshake"] if len(numbered) else pd.Series(dtype=str)
    resumed = int(later.isin(RESUMED).sum())
    out: dict[str, Any] = {"devices": int(numbered["device"].nunique()) if len(numbered) else 0,
                           "reconnections": int(len(later)), "resumed_after_first": resumed}
    if not tls or not mode.startswith("resume-") or later.empty:
        out["verdict"] = None
    elif resumed == len(later):
        out["verdict"] = "every reconnection resumed"
    elif resumed == 0:
        out["verdict"] = ("resumption refused: every reconnection after the first was a full handshake on the "
                          "wire (the broker did not accept the offered session)")
    else:
        out["verdict"] = f"{len(later) - resumed} of {len(later)} reconnections were full handshakes on the wire"
    return out


def lifecycle(rows: pd.DataFrame, mismatches: list[dict[str, Any]], *, mode: str, per_connection: int,
              close: str, expected: int, readings: int, tls: bool) -> dict[str, Any]:
    """metrics.json ``connections``: counts, handshakes by kind, costs per connection and per reading."""
    wire = (rows["wire_client_to_server"] + rows["wire_server_to_client"]) if len(rows) else pd.Series(dtype=float)
    setup = pd.to_numeric(rows.get("syn_to_first_publish_ms"), errors="coerce") if len(rows) else wire
    per_reading = readings if readings else None
    return {
        "mode": mode, "per_connection": per_connection, "close": close,
        "expected": expected, "count": int(len(rows)), "missing": max(expected - int(len(rows)), 0),
        "handshakes": {k: int((rows["handshake"] == k).sum()) if len(rows) else 0 for k in KINDS},
        **_resumption(rows, mode, tls),
        "by_kind": _by_kind(rows) if len(rows) else {},
        "tcp_end": {str(k): int(v) for k, v in rows["tcp_end"].value_counts().items()} if len(rows) else {},
        "client_claims": {"compared": int(rows["claimed_resumed"].notna().sum()) if "claimed_resumed" in rows
                          else 0, "mismatches": mismatches},
        "wire_bytes": int(wire.sum()) if len(rows) else 0,
        "wire_bytes_per_reading": round(float(wire.sum()) / per_reading, 1) if per_reading and len(rows) else None,
        "setup_ms_per_reading": (round(float(setup.dropna().sum()) / per_reading, 3)
                                 if per_reading and len(rows) and setup.notna().any() else None),
        **{f"{c}_median": _median(rows, c) for c in MEDIANS},
    }


def attribution_warnings(rows: pd.DataFrame, by: str | None) -> list[str]:
    """A fleet whose connections could not be told apart by device (some finished a handshake and carry no client
    id: their CONNECT not decrypted), which made every per-device figure one device's: said, not silent."""
    if by is None or by not in rows or rows.empty or set(rows["device"]) != {""}:
        return []
    ids = rows[by]
    named = ids.notna() & (ids.astype(str) != "")
    if not bool(named.any()):
        return []
    return [f"{int((~named).sum())} of {len(rows)} connections carry no client id, and one that finished its "
            "handshake among them (no key for it?): the fleet's connections are counted as one device's"]


def mismatch_warnings(block: dict[str, Any]) -> list[str]:
    """One warning per disagreement between the publisher's claim and the wire."""
    return [f"connection {m['connection']}{' (' + m['device'] + ')' if m.get('device') else ''}: the publisher says "
            f"{m['client_says']}, the wire shows {m['wire']}" for m in block["client_claims"]["mismatches"]]
