"""The analysis' earlier per-stream code, kept as the reference its one-pass replacements must equal.

handshake.sessions, segments.broker_losses, metrics.resent and tshark._whole_lines once walked the
tables stream by stream (or buffer by buffer); test_one_pass.py checks today's code gives the same
results on reference captures and on random tables. Not used by the analysis itself. broker_losses
here has the D-SACK rule added with the one-pass code (a copy resent before any ACK answered it was
delivered when an ACK after the resend reports its bytes twice), written copy by copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR
from orchestrator.analysis.handshake import ACK, MQTT_CONNACK, MQTT_CONNECT, SYN, _has, _ms, negotiated, suite_fields
from orchestrator.analysis.segments import RST, ByteRanges, _answered_by_reset, _blocks, _next_copy_frame, runs_of


def _with_token(rows: pd.DataFrame, col: str, token: str) -> pd.DataFrame:
    mask = np.fromiter((_has(v, token) for v in rows[col]), dtype=bool, count=len(rows))
    return rows[mask]


def _first_time(rows: pd.DataFrame) -> float | None:
    return float(rows["time"].iloc[0]) if len(rows) else None


def _finished_without_keys(rows: pd.DataFrame) -> float | None:
    seen_ccs = False
    for t, ctypes in zip(rows["time"], rows["tls_ctype"], strict=True):
        for c in ctypes.split(AGGREGATOR) if ctypes else ():
            if c == "20":
                seen_ccs = True
            elif c == "22" and seen_ccs:
                return float(t)
    return None


def session_handshake(pk: pd.DataFrame, msgs: pd.DataFrame, broker_port: int) -> dict[str, Any]:
    from_client = (pk["dst_port"] == broker_port).to_numpy()
    flags = pk["tcp_flags"].to_numpy()
    c, s = pk[from_client], pk[~from_client]
    syn_t = _first_time(c[(flags[from_client] & (SYN | ACK)) == SYN])
    synack_t = _first_time(s[(flags[~from_client] & (SYN | ACK)) == (SYN | ACK)])
    ack_t = None
    if synack_t is not None:
        ack_t = _first_time(c[((flags[from_client] & (SYN | ACK)) == ACK) & (c["time"] >= synack_t).to_numpy()])
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
    connect_t = _first_time(msgs[(mtype == MQTT_CONNECT) & (msgs["dst_port"] == broker_port).to_numpy()])
    connack_t = _first_time(msgs[(mtype == MQTT_CONNACK) & (msgs["src_port"] == broker_port).to_numpy()])
    bytes_c2s = bytes_s2c = None
    if connack_t is not None:
        upto = (pk["time"] <= connack_t).to_numpy()
        bytes_c2s = int(pk["frame_len"].to_numpy()[upto & from_client].sum())
        bytes_s2c = int(pk["frame_len"].to_numpy()[upto & ~from_client].sum())
    client_port = c["src_port"].iloc[0] if len(c) else (s["dst_port"].iloc[0] if len(s) else np.nan)
    return {"stream": int(pk["stream"].iloc[0]), "client_port": int(client_port) if pd.notna(client_port) else None,
            "client_ip": (c["ip_src"].iloc[0] or c["ipv6_src"].iloc[0]) if len(c) else None,
            "start_time": float(pk["time"].iloc[0]), "tcp_connect_ms": _ms(syn_t, ack_t),
            "tls_handshake_ms": _ms(_first_time(ch), tls_end) if len(ch) else None,
            "tls_finished_from": finished_from if tls_end is not None else None,
            "mqtt_connect_ms": _ms(connect_t, connack_t), "bytes_client_to_server": bytes_c2s,
            "bytes_server_to_client": bytes_s2c, "version": version, **suite_fields(suite)}


def sessions(packets: pd.DataFrame, msgs: pd.DataFrame, broker_port: int) -> list[dict[str, Any]]:
    touches = (packets["dst_port"] == broker_port) | (packets["src_port"] == broker_port)
    on_port = packets[touches.to_numpy()]
    msgs_on_port = msgs[((msgs["dst_port"] == broker_port) | (msgs["src_port"] == broker_port)).to_numpy()]
    mtype = msgs_on_port["mqtt_type"].fillna(0).to_numpy()
    connack = msgs_on_port[(mtype == MQTT_CONNACK) & (msgs_on_port["src_port"] == broker_port).to_numpy()]
    last = connack.groupby("stream")["frame"].min()
    on_port = on_port[on_port["frame"].to_numpy() <= on_port["stream"].map(last).fillna(np.inf).to_numpy()]
    early = msgs_on_port[msgs_on_port["frame"].to_numpy()
                         <= msgs_on_port["stream"].map(last).fillna(np.inf).to_numpy()]
    by_stream = dict(tuple(early.groupby("stream", sort=False)))
    empty = early.iloc[0:0]
    return [session_handshake(pk, by_stream.get(stream, empty), broker_port)
            for stream, pk in on_port.groupby("stream", sort=True)]


def _delivered(data: pd.DataFrame, acks: pd.DataFrame) -> np.ndarray:
    frames = data["frame"].to_numpy(dtype=float)
    seq = data["tcp_seq"].to_numpy(dtype=float)
    end = seq + data["tcp_len"].to_numpy(dtype=float)
    nxt = _next_copy_frame(frames, seq, end)
    ack_frame = acks["frame"].to_numpy(dtype=float)
    cum = np.maximum.accumulate(acks["tcp_ack"].fillna(0).to_numpy(dtype=float)) if len(acks) else np.array([])
    sacks = [_blocks(le, re_) for le, re_ in zip(acks["sack_le"], acks["sack_re"], strict=True)]
    reset = ((acks["tcp_flags"].fillna(0).astype(int) & RST) != 0).to_numpy() if "tcp_flags" in acks else \
        np.zeros(len(acks), dtype=bool)
    reset_seq = acks["tcp_seq"].to_numpy(dtype=float) if "tcp_seq" in acks else np.zeros(len(acks))
    copy_ack = data["tcp_ack"].to_numpy(dtype=float) if "tcp_ack" in data else np.full(len(data), np.nan)
    answer = (reset, reset_seq, copy_ack)
    out = np.zeros(len(data), dtype=bool)
    for i in range(len(data)):
        lo = np.searchsorted(ack_frame, frames[i], side="right")
        hi = np.searchsorted(ack_frame, nxt[i], side="left")
        if lo >= hi:
            continue
        before = cum[lo - 1] if lo > 0 else -np.inf
        if before < end[i] <= cum[hi - 1] or _answered_by_reset(i, lo, hi, frames, ack_frame, answer):
            out[i] = True
            continue
        out[i] = any(a <= seq[i] and end[i] <= b for k in range(lo, hi) for a, b in sacks[k])
    acked = acks["tcp_ack"].fillna(0).to_numpy(dtype=float)
    for i in range(len(data)):  # the rule added with the one-pass code: a D-SACK after the next copy
        if out[i] or nxt[i] == np.inf:
            continue
        j = int(np.flatnonzero(frames == nxt[i])[0])
        lo = np.searchsorted(ack_frame, frames[j], side="right")
        hi = np.searchsorted(ack_frame, nxt[j], side="left")
        for k in range(lo, hi):
            if sacks[k]:
                (a, b), second = sacks[k][0], sacks[k][1] if len(sacks[k]) > 1 else None
                dsack = b <= acked[k] or (second is not None and second[0] <= a and b <= second[1])
                out[i] = out[i] or (dsack and a <= seq[i] and end[i] <= b)
    return out


def broker_losses(packets: pd.DataFrame, streams: set[int], broker_port: int) -> dict[str, Any]:
    lost_all: list[np.ndarray] = []
    copies = 0
    for stream in sorted(streams):
        pk = packets[packets["stream"] == stream].sort_values("frame")
        data = pk[(pk["dst_port"] == broker_port) & (pk["tcp_len"] > 0) & pk["tcp_seq"].notna()]
        acks = pk[(pk["src_port"] == broker_port) & pk["tcp_ack"].notna()]
        if data.empty:
            continue
        lost_all.append(~_delivered(data, acks))
        copies += len(data)
    lost = np.concatenate(lost_all) if lost_all else np.zeros(0, dtype=bool)
    runs = np.concatenate([runs_of(x) for x in lost_all]) if lost_all else np.zeros(0, dtype=int)
    return {"tcp_copies_to_broker": copies, "tcp_copies_lost_to_broker": int(lost.sum()),
            "tcp_copy_loss_pct": float(lost.mean() * 100) if copies else None,
            "tcp_loss_runs_to_broker": int(len(runs)),
            "tcp_loss_run_mean": float(runs.mean()) if len(runs) else None,
            "tcp_loss_run_max": int(runs.max()) if len(runs) else None}


def whole_lines(blocks: Iterable[bytes], chunk_bytes: int) -> Iterator[str]:
    pending = b""
    for block in blocks:
        pending += block
        if len(pending) >= chunk_bytes:
            cut = pending.rfind(b"\n") + 1
            if cut:
                yield pending[:cut].decode("utf-8", errors="replace")
                pending = pending[cut:]
    if pending:
        yield pending.decode("utf-8", errors="replace")


def resent(packets: pd.DataFrame) -> pd.Series:
    data = packets[(packets["tcp_len"] > 0) & packets["tcp_seq"].notna()].sort_values("frame")
    flag = pd.Series(False, index=packets.index)
    for _key, group in data.groupby([data["stream"], data["src_port"]], sort=False):
        seen = ByteRanges()
        hits = [seen.add(s, s + n) for s, n in zip(group["tcp_seq"], group["tcp_len"], strict=True)]
        flag.loc[group.index] = hits
    return flag.astype(bool)
