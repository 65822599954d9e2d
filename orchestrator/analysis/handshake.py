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

from collections.abc import Mapping
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


def _ms(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start) * 1000.0


def _finished_without_keys(times: np.ndarray, ctypes: np.ndarray) -> float | None:
    """TLS 1.2 without keys: first handshake record (type 22) after ChangeCipherSpec (type 20)."""
    seen_ccs = False
    for t, cell in zip(times, ctypes, strict=True):
        for c in cell.split(AGGREGATOR) if cell else ():
            if c == "20":
                seen_ccs = True
            elif c == "22" and seen_ccs:
                return float(t)
    return None


def negotiated(server_hello: pd.Series | Mapping[str, str]) -> tuple[str | None, int | None]:
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


class _ByStream:
    """Per-stream figures over the rows of a table sorted (stably) by stream, in one pass each."""

    def __init__(self, stream: np.ndarray) -> None:
        self.stream = stream

    def first(self, mask: np.ndarray, values: np.ndarray) -> dict[float, Any]:
        """stream -> ``values`` at its first row where ``mask`` holds (streams without one left out)."""
        rows = np.flatnonzero(mask)
        keys, at = np.unique(self.stream[rows], return_index=True)
        return dict(zip(keys.tolist(), values[rows[at]].tolist(), strict=True))

    def total(self, mask: np.ndarray, values: np.ndarray) -> dict[float, int]:
        """stream -> sum of ``values`` over its rows where ``mask`` holds."""
        keys, inverse = np.unique(self.stream[mask], return_inverse=True)
        sums = np.bincount(inverse, weights=values[mask], minlength=len(keys))
        return {k: int(round(v)) for k, v in zip(keys.tolist(), sums.tolist(), strict=True)}

    def per_row(self, by_stream: dict[float, Any]) -> np.ndarray:
        """Each row's stream's value (NaN where it has none): comparisons with it are then False."""
        return pd.Series(self.stream).map(by_stream).to_numpy(dtype=float)


def _has_token(cells: np.ndarray, mask: np.ndarray, token: str) -> np.ndarray:
    out = np.zeros(len(cells), dtype=bool)
    for i in np.flatnonzero(mask):
        out[i] = _has(cells[i], token)
    return out


def _by_stream(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows[rows["stream"].notna().to_numpy()]
    return rows.iloc[np.argsort(rows["stream"].to_numpy(), kind="stable")]


def _early_frames(packets: pd.DataFrame, msgs: pd.DataFrame, broker_port: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Frames and MQTT messages on the broker port up to each stream's CONNACK, sorted by stream (the rows
    chosen first, then only the columns needed are copied)."""
    m_on_port = ((msgs["dst_port"] == broker_port) | (msgs["src_port"] == broker_port)).to_numpy()
    mtype = msgs["mqtt_type"].fillna(0).to_numpy()
    connack = msgs.loc[m_on_port & (mtype == MQTT_CONNACK) & (msgs["src_port"] == broker_port).to_numpy(),
                       ["stream", "frame"]]
    last = connack.groupby("stream")["frame"].min()

    def early(table: pd.DataFrame) -> np.ndarray:
        return table["frame"].to_numpy() <= table["stream"].map(last).fillna(np.inf).to_numpy()

    touches = ((packets["dst_port"] == broker_port) | (packets["src_port"] == broker_port)).to_numpy()
    on_port = packets.loc[touches & early(packets), list(_SESSION_COLUMNS)]
    early_msgs = msgs.loc[m_on_port & early(msgs), ["stream", "time", "mqtt_type", "src_port", "dst_port"]]
    return _by_stream(on_port), _by_stream(early_msgs)


_SESSION_COLUMNS = ("frame", "time", "stream", "src_port", "dst_port", "tcp_flags", "frame_len", "tls_ctype",
                    "tls_hs_type", "tls_sup_ver", "tls_hs_ver", "tls_cipher", "ip_src", "ipv6_src")


def _tcp_and_mqtt(on: pd.DataFrame, early: pd.DataFrame, broker_port: int) -> dict[str, dict[float, Any]]:
    """Per stream: SYN, SYN-ACK, completing ACK, CONNECT, CONNACK times; bytes each way up to CONNACK."""
    by, t = _ByStream(on["stream"].to_numpy()), on["time"].to_numpy(dtype=float)
    client = (on["dst_port"] == broker_port).to_numpy()
    flags = on["tcp_flags"].to_numpy() & (SYN | ACK)
    out = {"syn": by.first(client & (flags == SYN), t), "synack": by.first(~client & (flags == SYN | ACK), t)}
    out["ack"] = by.first(client & (flags == ACK) & (t >= by.per_row(out["synack"])), t)
    m_by, mt = _ByStream(early["stream"].to_numpy()), early["mqtt_type"].fillna(0).to_numpy()
    m_t = early["time"].to_numpy(dtype=float)
    out["connect"] = m_by.first((mt == MQTT_CONNECT) & (early["dst_port"] == broker_port).to_numpy(), m_t)
    out["connack"] = m_by.first((mt == MQTT_CONNACK) & (early["src_port"] == broker_port).to_numpy(), m_t)
    upto = t <= by.per_row(out["connack"])
    frame_len = on["frame_len"].to_numpy(dtype=float)
    out["c2s"], out["s2c"] = by.total(upto & client, frame_len), by.total(upto & ~client, frame_len)
    rows = np.arange(len(on))
    out["c_row"], out["s_row"] = by.first(client, rows), by.first(~client, rows)
    return out


def _tls(on: pd.DataFrame, broker_port: int) -> dict[str, dict[float, Any]]:
    """Per stream: ClientHello and each side's decrypted Finished times, the ServerHello's row."""
    by, t = _ByStream(on["stream"].to_numpy()), on["time"].to_numpy(dtype=float)
    hs_type = on["tls_hs_type"].to_numpy(dtype=object)
    hs = (on["tls_ctype"] != "").to_numpy() & (hs_type != "")
    client, server = (on["dst_port"] == broker_port).to_numpy(), (on["src_port"] == broker_port).to_numpy()
    fin = _has_token(hs_type, hs, "20")
    return {"ch": by.first(_has_token(hs_type, hs & client, "1"), t),
            "sh_row": by.first(_has_token(hs_type, hs & server, "2"), np.arange(len(on))),
            "c_fin": by.first(fin & client, t), "s_fin": by.first(fin & server, t)}


def _finished(on: pd.DataFrame, rows: slice, broker_port: int, version: str | None,
              decrypted: tuple[float | None, float | None]) -> tuple[float | None, str]:
    """The later Finished of the two sides and where it was read (TLS 1.2 without keys: after CCS)."""
    c_fin, s_fin = decrypted
    finished_from = "decrypted Finished"
    if (c_fin is None or s_fin is None) and version == "TLS 1.2":
        pk = on.iloc[rows]
        tls = pk[(pk["tls_ctype"] != "").to_numpy()]
        for_side = [(tls["dst_port"] == broker_port).to_numpy(), (tls["src_port"] == broker_port).to_numpy()]
        c_fin, s_fin = (_finished_without_keys(tls["time"].to_numpy()[side], tls["tls_ctype"].to_numpy()[side])
                        for side in for_side)
        finished_from = "first record after ChangeCipherSpec (no keys)"
    return (max(c_fin, s_fin) if c_fin is not None and s_fin is not None else None), finished_from


def _session(on: pd.DataFrame, rows: slice, k: float, f: dict[str, dict[float, Any]],
             broker_port: int) -> dict[str, Any]:
    """One stream's record from the per-stream figures ``f`` (``rows``: its rows in ``on``)."""
    col = on.columns.get_loc
    version, suite = None, None
    if k in f["sh_row"]:
        version, suite = negotiated({c: on.iat[f["sh_row"][k], col(c)] for c in ("tls_sup_ver", "tls_hs_ver",
                                                                                    "tls_cipher")})
    tls_end, finished_from = _finished(on, rows, broker_port, version, (f["c_fin"].get(k), f["s_fin"].get(k)))
    if k in f["c_row"]:  # the client's first frame, else the server's
        first_c = f["c_row"][k]
        client_port = on.iat[first_c, col("src_port")]
        client_ip = on.iat[first_c, col("ip_src")] or on.iat[first_c, col("ipv6_src")]
    else:
        client_port, client_ip = on.iat[f["s_row"][k], col("dst_port")], None
    connack_t = f["connack"].get(k)
    return {
        "stream": int(k),
        "client_port": int(client_port) if pd.notna(client_port) else None,
        "client_ip": client_ip,
        "start_time": float(on.iat[rows.start, col("time")]),
        "tcp_connect_ms": _ms(f["syn"].get(k), f["ack"].get(k)),
        "tls_handshake_ms": _ms(f["ch"][k], tls_end) if k in f["ch"] else None,
        "tls_finished_from": finished_from if tls_end is not None else None,
        "mqtt_connect_ms": _ms(f["connect"].get(k), connack_t),
        "bytes_client_to_server": f["c2s"].get(k, 0) if connack_t is not None else None,
        "bytes_server_to_client": f["s2c"].get(k, 0) if connack_t is not None else None,
        "version": version,
        **suite_fields(suite),
    }


def sessions(packets: pd.DataFrame, msgs: pd.DataFrame, broker_port: int) -> list[dict[str, Any]]:
    """One handshake record per TCP stream touching the broker port, in stream order.

    Only each stream's frames up to its CONNACK are looked at (every handshake ends before it). Each
    figure is taken for every stream at once (the first matching frame of each stream); only TLS 1.2
    without keys reads a stream's records one by one.
    """
    on, early = _early_frames(packets, msgs, broker_port)
    figures = {**_tcp_and_mqtt(on, early, broker_port), **_tls(on, broker_port)}
    stream = on["stream"].to_numpy()
    keys, starts = np.unique(stream, return_index=True)
    ends = [*starts[1:].tolist(), len(on)]
    return [_session(on, slice(a, b), k, figures, broker_port)
            for k, a, b in zip(keys.tolist(), starts.tolist(), ends, strict=True)]


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
