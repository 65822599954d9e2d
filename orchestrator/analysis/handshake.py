"""Connection set-up per TCP session on the broker port: TCP, TLS and MQTT handshakes.

Definitions (MEASUREMENT.md "handshake"), all at the capture point (the broker's namespace):
- tcp_connect_ms: client SYN -> the client's ACK that completes the three-way handshake;
- tls_handshake_ms: ClientHello -> the later of the client's and the server's Finished. Finished is
  read from the decrypted handshake; without keys (TLS 1.2 only) it is the first handshake record
  after each side's ChangeCipherSpec;
- mqtt_connect_ms: CONNECT -> CONNACK;
- bytes_client_to_server / bytes_server_to_client: wire bytes (all headers) of every frame of the
  session up to and including the frame carrying CONNACK;
- version and cipher suite: from the ServerHello (supported_versions extension first).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR
from orchestrator.model.ciphers import by_code

SYN, ACK = 0x02, 0x10
MQTT_CONNECT, MQTT_CONNACK = 1, 2
TLS_VERSIONS = {0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}


def _has(cell: str, token: str) -> bool:
    return token in cell.split(AGGREGATOR) if cell else False


def _with_token(rows: pd.DataFrame, col: str, token: str) -> pd.DataFrame:
    mask = np.fromiter((_has(v, token) for v in rows[col]), dtype=bool, count=len(rows))
    return rows[mask]


def _first_time(rows: pd.DataFrame) -> float | None:
    return float(rows["time"].iloc[0]) if len(rows) else None


def _ms(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start) * 1000.0


def _finished_without_keys(rows: pd.DataFrame) -> float | None:
    """TLS 1.2 without keys: first handshake record (type 22) after ChangeCipherSpec (type 20)."""
    seen_ccs = False
    for t, ctypes in zip(rows["time"], rows["tls_ctype"], strict=True):
        for c in ctypes.split(AGGREGATOR) if ctypes else ():
            if c == "20":
                seen_ccs = True
            elif c == "22" and seen_ccs:
                return float(t)
    return None


def negotiated(server_hello: pd.Series) -> tuple[str | None, int | None]:
    """(version name, suite id) from a ServerHello frame's fields."""
    sup = [v for v in server_hello["tls_sup_ver"].split(AGGREGATOR) if v]
    hs = [v for v in server_hello["tls_hs_ver"].split(AGGREGATOR) if v]
    version_code = int(sup[0], 16) if sup else (int(hs[0], 16) if hs else None)
    suites = [v for v in server_hello["tls_cipher"].split(AGGREGATOR) if v]
    suite = int(suites[0], 16) if suites else None
    version = TLS_VERSIONS.get(version_code, f"0x{version_code:04x}") if version_code is not None else None
    return version, suite


def suite_fields(suite: int | None) -> dict[str, Any]:
    known = by_code(suite) if suite is not None else None
    return {"cipher_suite": known.iana if known else None,
            "cipher_suite_id": f"0x{suite:04x}" if suite is not None else None}


def session_handshake(pk: pd.DataFrame, msgs: pd.DataFrame, broker_port: int) -> dict[str, Any]:
    """Handshake figures of one TCP stream (``pk``: its packets; ``msgs``: its MQTT messages)."""
    from_client = (pk["dst_port"] == broker_port).to_numpy()
    flags = pk["tcp_flags"].to_numpy()
    c, s = pk[from_client], pk[~from_client]
    syn_t = _first_time(c[(flags[from_client] & (SYN | ACK)) == SYN])
    synack = s[(flags[~from_client] & (SYN | ACK)) == (SYN | ACK)]
    synack_t = _first_time(synack)
    ack_t = None
    if synack_t is not None:
        acks = c[((flags[from_client] & (SYN | ACK)) == ACK) & (c["time"] >= synack_t).to_numpy()]
        ack_t = _first_time(acks)
    tls_rows = pk[(pk["tls_ctype"] != "").to_numpy()]
    hs_rows = tls_rows[(tls_rows["tls_hs_type"] != "").to_numpy()]
    ch = _with_token(hs_rows[(hs_rows["dst_port"] == broker_port).to_numpy()], "tls_hs_type", "1")
    sh = _with_token(hs_rows[(hs_rows["src_port"] == broker_port).to_numpy()], "tls_hs_type", "2")
    fin = _with_token(hs_rows, "tls_hs_type", "20")
    version, suite = negotiated(sh.iloc[0]) if len(sh) else (None, None)
    c_fin = _first_time(fin[(fin["dst_port"] == broker_port).to_numpy()])
    s_fin = _first_time(fin[(fin["src_port"] == broker_port).to_numpy()])
    finished_from = "decrypted Finished"
    if (c_fin is None or s_fin is None) and version == "TLS 1.2":
        c_fin = _finished_without_keys(tls_rows[(tls_rows["dst_port"] == broker_port).to_numpy()])
        s_fin = _finished_without_keys(tls_rows[(tls_rows["src_port"] == broker_port).to_numpy()])
        finished_from = "first record after ChangeCipherSpec (no keys)"
    tls_end = max(c_fin, s_fin) if c_fin is not None and s_fin is not None else None
    mtype = msgs["mqtt_type"].fillna(0).to_numpy()
    connect = msgs[(mtype == MQTT_CONNECT) & (msgs["dst_port"] == broker_port).to_numpy()]
    connack = msgs[(mtype == MQTT_CONNACK) & (msgs["src_port"] == broker_port).to_numpy()]
    connect_t, connack_t = _first_time(connect), _first_time(connack)
    bytes_c2s = bytes_s2c = None
    if connack_t is not None:
        upto = (pk["time"] <= connack_t).to_numpy()
        bytes_c2s = int(pk["frame_len"].to_numpy()[upto & from_client].sum())
        bytes_s2c = int(pk["frame_len"].to_numpy()[upto & ~from_client].sum())
    client_port = c["src_port"].iloc[0] if len(c) else (s["dst_port"].iloc[0] if len(s) else np.nan)
    return {
        "stream": int(pk["stream"].iloc[0]),
        "client_port": int(client_port) if pd.notna(client_port) else None,
        "client_ip": (c["ip_src"].iloc[0] or c["ipv6_src"].iloc[0]) if len(c) else None,
        "start_time": float(pk["time"].iloc[0]),
        "tcp_connect_ms": _ms(syn_t, ack_t),
        "tls_handshake_ms": _ms(_first_time(ch), tls_end) if len(ch) else None,
        "tls_finished_from": finished_from if tls_end is not None else None,
        "mqtt_connect_ms": _ms(connect_t, connack_t),
        "bytes_client_to_server": bytes_c2s,
        "bytes_server_to_client": bytes_s2c,
        "version": version,
        **suite_fields(suite),
    }


def sessions(packets: pd.DataFrame, msgs: pd.DataFrame, broker_port: int) -> list[dict[str, Any]]:
    """One handshake record per TCP stream touching the broker port, in stream order.

    Only each stream's frames up to its CONNACK are looked at (every handshake ends before it).
    """
    touches = (packets["dst_port"] == broker_port) | (packets["src_port"] == broker_port)
    on_port = packets[touches.to_numpy()]
    msgs_on_port = msgs[((msgs["dst_port"] == broker_port) | (msgs["src_port"] == broker_port)).to_numpy()]
    mtype = msgs_on_port["mqtt_type"].fillna(0).to_numpy()
    connack = msgs_on_port[(mtype == MQTT_CONNACK) & (msgs_on_port["src_port"] == broker_port).to_numpy()]
    last = connack.groupby("stream")["frame"].min()
    limit = on_port["stream"].map(last).fillna(np.inf).to_numpy()
    on_port = on_port[on_port["frame"].to_numpy() <= limit]
    early = msgs_on_port[msgs_on_port["frame"].to_numpy()
                         <= msgs_on_port["stream"].map(last).fillna(np.inf).to_numpy()]
    by_stream = dict(tuple(early.groupby("stream", sort=False)))
    empty = early.iloc[0:0]
    return [session_handshake(pk, by_stream.get(stream, empty), broker_port)
            for stream, pk in on_port.groupby("stream", sort=True)]


_HS_KEYS = ("tcp_connect_ms", "tls_handshake_ms", "mqtt_connect_ms", "bytes_client_to_server",
            "bytes_server_to_client")


def publisher_summary(pub_sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json ``handshake``: the publisher session's figures (the median over several sessions)."""
    out: dict[str, Any] = {}
    for k in _HS_KEYS:
        vals = [s[k] for s in pub_sessions if s[k] is not None]
        out[k] = float(np.median(vals)) if vals else None
        if vals and k.startswith("bytes"):
            out[k] = int(round(out[k]))
    out["publisher_sessions"] = len(pub_sessions)
    out["aggregate"] = "value of the publisher session" if len(pub_sessions) <= 1 else \
        f"median over {len(pub_sessions)} publisher sessions"
    return out


def tls_summary(sessions: list[dict[str, Any]], pub_sessions: list[dict[str, Any]],
                 warnings: list[str]) -> dict[str, Any]:
    """metrics.json ``tls``: the negotiated parameters (a warning when sessions differ) and every session."""
    tls_sessions = [s for s in sessions if s["cipher_suite_id"] is not None]
    ref = next((s for s in pub_sessions if s["cipher_suite_id"] is not None),
               tls_sessions[0] if tls_sessions else None)
    combos = {(s["version"], s["cipher_suite_id"]) for s in tls_sessions}
    if len(combos) > 1:
        warnings.append(f"TLS sessions on the broker port negotiated different parameters: {sorted(combos)}")
    return {
        "version": ref["version"] if ref else None,
        "cipher_suite": ref["cipher_suite"] if ref else None,
        "cipher_suite_id": ref["cipher_suite_id"] if ref else None,
        "sessions": [{k: s[k] for k in ("stream", "role", "client_ip", "client_port", "version",
                                        "cipher_suite", "cipher_suite_id", "tcp_connect_ms",
                                        "tls_handshake_ms", "tls_finished_from", "mqtt_connect_ms",
                                        "bytes_client_to_server", "bytes_server_to_client")}
                     for s in sessions],
    }
