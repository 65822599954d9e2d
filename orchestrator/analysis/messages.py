"""Per-packet table -> one row per MQTT message (several can share a frame) -> per-message table.

Length attribution when messages share a frame: ``mqtt_len`` and ``tls_record_len`` are each
message's own (TLS records pair 1:1 with MQTT messages whenever a frame holds as many application
data records as MQTT messages, else ``tls_record_len`` is left empty); ``tcp_payload_len`` and
``frame_len`` are the whole segment's, shared by its ``msgs_in_frame`` messages, so overhead
figures are taken only from messages alone in their frame.

A message's key is its sequence number; in a fleet (many devices on one topic, each numbering its own
messages from 0) it is (device, seq), the device being the payload's id (``keys`` below).
"""

from __future__ import annotations

import sys
from itertools import islice

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR
from orchestrator.clients.payload import parse_message

PUBLISH = 3
TLS_APPLICATION_DATA = "23"
TLS_RECORD_HEADER = 5
SEQ_KEY = ("seq",)
FLEET_KEY = ("device", "seq")
PAYLOAD_CACHE_SIZE = 50_000  # ~25 s of a 2,000 msg/s fleet; a broker forwards a PUBLISH within far less
PACKET_COLUMNS = ("frame", "time", "stream", "src_port", "dst_port", "frame_len", "tcp_len", "ip_hdr_len",
                  "tcp_hdr_len", "retrans")


def _flatten(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Per-row occurrence counts and the flat list of all occurrences, in row order."""
    values = col.tolist()
    if not values:
        return np.zeros(0, dtype=np.int64), []
    joined = "\n".join(values)
    raw = np.frombuffer(joined.encode("ascii", errors="replace"), dtype=np.uint8)
    pipes = np.flatnonzero(raw == ord(AGGREGATOR))
    ends = np.append(np.searchsorted(pipes, np.flatnonzero(raw == ord("\n"))), len(pipes))
    counts = np.diff(ends, prepend=0) + 1
    return counts.astype(np.int64), joined.replace("\n", AGGREGATOR).split(AGGREGATOR)


def _to_int(values: list[str]) -> pd.array:
    """Decimal strings -> nullable ints (fast path when none is empty)."""
    try:
        return pd.array(np.fromiter(map(int, values), dtype=np.int64, count=len(values)), dtype="Int64")
    except (ValueError, OverflowError):
        return pd.array(pd.to_numeric(pd.Series(values, dtype=object), errors="coerce"), dtype="Int64")


def _missing_ints(n: int) -> pd.array:
    return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))


def mqtt_header_len(remaining: np.ndarray) -> np.ndarray:
    """Fixed header size: 1 type byte + the variable-length 'remaining length' (1..4 bytes)."""
    return 1 + np.select([remaining < 128, remaining < 16384, remaining < 2097152], [1, 2, 3], 4)


def explode_mqtt(packets: pd.DataFrame,
                 payload_cache: dict[str, tuple[str, int, int] | None] | None = None) -> pd.DataFrame:
    """One row per MQTT message with its frame's columns, TLS record length and decoded payload.

    ``payload_cache`` (hex payload -> decoded) may be shared between calls on consecutive chunks; it is
    kept to the :data:`PAYLOAD_CACHE_SIZE` payloads decoded last.
    """
    m = packets[packets["mqtt_type"] != ""]
    n_type, types = _flatten(m["mqtt_type"])
    n_len, lens = _flatten(m["mqtt_len"])
    if not np.array_equal(n_type, n_len):  # a message without length field: should never happen
        lens = [v for t, ln in zip(m["mqtt_type"], m["mqtt_len"], strict=True)
                for v in (ln.split(AGGREGATOR) if ln.count(AGGREGATOR) == t.count(AGGREGATOR)
                          else [""] * (t.count(AGGREGATOR) + 1))]
    rows = np.repeat(np.arange(len(m)), n_type)
    starts = np.repeat(np.cumsum(n_type) - n_type, n_type)
    msgs = m[list(PACKET_COLUMNS)].iloc[rows].reset_index(drop=True)
    msgs["idx_in_frame"] = np.arange(len(rows)) - starts
    msgs["msgs_in_frame"] = np.repeat(n_type, n_type)
    msgs["mqtt_type"] = _to_int(types)
    rem = pd.Series(_to_int(lens))
    msgs["mqtt_len"] = (rem + mqtt_header_len(rem.fillna(0).to_numpy())).astype("Int64")

    msgs["tls_record_len"] = _tls_record_lengths(m, n_type)
    if "ws_len7" in m.columns:
        msgs["ws_header_len"] = ws_header_lengths(m, n_type)
    targets, payload_hex = _publish_payloads(m, (msgs["mqtt_type"] == PUBLISH).fillna(False).to_numpy(), rows)
    payload_len = _missing_ints(len(msgs))
    payload_len[targets] = np.fromiter((len(h) // 2 for h in payload_hex), dtype=np.int64, count=len(targets))
    msgs["payload_len"] = payload_len
    # each payload crosses the broker twice (in and out), the second time soon after: decode it once
    decoded = payload_cache if payload_cache is not None else {}
    for h in payload_hex:
        if h and h not in decoded:
            decoded[h] = parse_message(bytes.fromhex(h))
    parsed = [decoded.get(h) if h else None for h in payload_hex]
    if len(decoded) > PAYLOAD_CACHE_SIZE:  # the oldest half goes (a payload seen again is decoded again)
        for h in list(islice(decoded, len(decoded) - PAYLOAD_CACHE_SIZE // 2)):
            del decoded[h]
    found = [p for p in parsed if p]
    at = targets[[i for i, p in enumerate(parsed) if p]]
    seq, t_send, device = _missing_ints(len(msgs)), _missing_ints(len(msgs)), np.full(len(msgs), None, dtype=object)
    seq[at] = pd.array([p[1] for p in found], dtype="Int64")
    t_send[at] = pd.array([p[2] for p in found], dtype="Int64")
    device[at] = [sys.intern(p[0]) for p in found]  # one string per device, not per message (a fleet's 425,000)
    msgs["seq"], msgs["payload_t_send_us"], msgs["device"] = seq, t_send, pd.array(device, dtype="str")
    return msgs


def _tls_record_lengths(m: pd.DataFrame, n_msgs: np.ndarray) -> pd.array:
    """Application-data record lengths paired 1:1 with a frame's MQTT messages (else NA)."""
    out = _missing_ints(int(n_msgs.sum()))
    n_ct, cts = _flatten(m["tls_ctype"])
    n_rl, rls = _flatten(m["tls_rec_len"])
    if not len(m) or not (m["tls_ctype"] != "").any():
        return out
    is_app = np.array(cts, dtype=object) == TLS_APPLICATION_DATA
    row_of = np.repeat(np.arange(len(m)), n_ct)
    app_per_row = np.bincount(row_of[is_app], minlength=len(m))
    aligned = n_ct == n_rl
    good_row = aligned & (app_per_row == n_msgs) & (m["tls_ctype"] != "").to_numpy()
    if not good_row.any():
        return out
    rl = np.array(rls, dtype=object) if np.array_equal(n_ct, n_rl) else None
    if rl is None:  # rows where lengths and types do not align are skipped one by one
        rl_list = [v for c, r in zip(m["tls_ctype"], m["tls_rec_len"], strict=True)
                   for v in (r.split(AGGREGATOR) if c.count(AGGREGATOR) == r.count(AGGREGATOR)
                             else [""] * (c.count(AGGREGATOR) + 1))]
        rl = np.array(rl_list, dtype=object)
    take = is_app & good_row[row_of]
    msg_good = np.repeat(good_row, n_msgs)
    out[np.flatnonzero(msg_good)] = _to_int(rl[take].tolist())
    return out


def ws_header_lengths(m: pd.DataFrame, n_msgs: np.ndarray) -> pd.array:
    """Each MQTT packet's WebSocket frame header (RFC 6455 5.2: 2 B, + 2 or 8 B of extended length when the 7-bit
    field says 126 or 127, + 4 B of mask key when masked), where a frame carries as many WebSocket frames as MQTT
    packets (one frame per packet); else NA (a packet split over frames or frames sharing one are not paired)."""
    out = _missing_ints(int(n_msgs.sum()))
    if not len(m) or not (m["ws_len7"] != "").any():
        return out
    n_len, lens = _flatten(m["ws_len7"])
    n_mask, masks = _flatten(m["ws_mask"])
    good_row = (n_len == n_msgs) & (n_mask == n_len) & (m["ws_len7"] != "").to_numpy()
    if not good_row.any():
        return out
    if not np.array_equal(n_len, n_mask):
        return out
    len7 = _to_int(lens).to_numpy(dtype=np.int64, na_value=0)
    masked = np.array([v in ("1", "True", "true") for v in masks], dtype=bool)
    header = 2 + np.select([len7 == 126, len7 == 127], [2, 8], 0) + 4 * masked
    take = np.repeat(good_row, n_len)
    out[np.flatnonzero(np.repeat(good_row, n_msgs))] = header[take]
    return out


def _publish_payloads(m: pd.DataFrame, is_pub: np.ndarray, row_of: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(positions, hex payloads) of the PUBLISH whose payload was exported: a frame's payloads are taken
    only when it has as many as it has PUBLISH."""
    pub_per_row = np.bincount(row_of[is_pub], minlength=len(m))
    cells = m["mqtt_msg"].tolist()
    n_msg = np.fromiter((c.count(AGGREGATOR) + 1 if c else 0 for c in cells), dtype=np.int64, count=len(cells))
    good_row = (n_msg == pub_per_row) & (n_msg > 0)
    flat = AGGREGATOR.join([c for c, good in zip(cells, good_row.tolist(), strict=True) if good]).split(AGGREGATOR) \
        if good_row.any() else []
    return np.flatnonzero(is_pub & good_row[row_of]), flat  # as many of each: the rows were chosen so


# ---------------------------------------------------------------- the per-message table

PER_MESSAGE_INT = ("t_send_us", "t_recv_us", "broker_in_us", "broker_out_us", "recv_count", "dup", "in_frame",
                   "out_frame", "msgs_in_frame", "payload_len", "mqtt_len", "tls_record_len", "tcp_payload_len",
                   "frame_len", "out_tls_record_len", "out_frame_len", "out_msgs_in_frame", "payload_t_send_us")
PER_MESSAGE_COLUMNS = ("seq", "t_send_us", "t_send_source", "t_recv_us", "recv_count", "dup", "delay_ms",
                       "broker_in_us", "broker_out_us", "broker_transit_ms", "uplink_ms", "payload_len", "mqtt_len",
                       "tls_record_len", "tls_overhead", "tcp_payload_len", "frame_len", "msgs_in_frame",
                       "in_frame", "out_frame", "out_msgs_in_frame", "out_tls_record_len", "out_frame_len",
                       "payload_t_send_us")


def _us(t: pd.Series) -> pd.Series:
    return pd.Series(np.rint(t.to_numpy(dtype="float64") * 1e6), index=t.index).astype("Int64")


def _first_per_seq(inb: pd.DataFrame, outb: pd.DataFrame, warnings: list[str],
                   keys: tuple[str, ...] = SEQ_KEY) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each leg's PUBLISH with a key, the first of each key (a warning for repeats)."""
    inb = inb[inb[list(keys)].notna().all(axis=1)] if keys != SEQ_KEY else inb[inb["seq"].notna()]
    outb = outb[outb[list(keys)].notna().all(axis=1)] if keys != SEQ_KEY else outb[outb["seq"].notna()]
    what = "a sequence number" if keys == SEQ_KEY else "a (device, sequence number)"
    for name, leg in (("publisher->broker", inb), ("broker->subscriber", outb)):
        dups = int(leg.duplicated(list(keys)).sum())
        if dups:
            warnings.append(f"{dups} PUBLISH on the {name} leg repeat {what} already seen there; "
                            "the first is used")
    return inb.drop_duplicates(list(keys)), outb.drop_duplicates(list(keys))


def _key_columns(leg: pd.DataFrame, keys: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {"seq": leg["seq"].astype("int64").to_numpy()}
    if "device" in keys:
        out = {"device": leg["device"].astype("str").to_numpy(), **out}
    return out


def _legs_by_seq(inb: pd.DataFrame, outb: pd.DataFrame, keys: tuple[str, ...] = SEQ_KEY) -> pd.DataFrame:
    """Both legs of the broker side by side, one row per key seen on either."""
    a = pd.DataFrame({
        **_key_columns(inb, keys),
        "payload_t_send_us": inb["payload_t_send_us"].to_numpy(),
        "broker_in_us": _us(inb["time"]).to_numpy(),
        "in_frame": inb["frame"].to_numpy(),
        "msgs_in_frame": inb["msgs_in_frame"].to_numpy(),
        "payload_len": inb["payload_len"].to_numpy(),
        "mqtt_len": inb["mqtt_len"].to_numpy(),
        "tls_record_len": inb["tls_record_len"].to_numpy(),
        "tcp_payload_len": inb["tcp_len"].astype("Int64").to_numpy(),
        "frame_len": inb["frame_len"].to_numpy(),
    })
    b = pd.DataFrame({
        **_key_columns(outb, keys),
        "out_payload_t_send_us": outb["payload_t_send_us"].to_numpy(),
        "broker_out_us": _us(outb["time"]).to_numpy(),
        "out_frame": outb["frame"].to_numpy(),
        "out_msgs_in_frame": outb["msgs_in_frame"].to_numpy(),
        "out_tls_record_len": outb["tls_record_len"].to_numpy(),
        "out_frame_len": outb["frame_len"].to_numpy(),
    })
    if "ws_header_len" in inb.columns and inb["ws_header_len"].notna().any():  # MQTT over WebSocket: each leg's
        a["ws_header_len"] = inb["ws_header_len"].to_numpy()                   # frame header (masked up, not down)
        b["out_ws_header_len"] = outb["ws_header_len"].to_numpy()
    return a.merge(b, on=list(keys), how="outer")


def _with_send_times(pm: pd.DataFrame, pub_log: pd.DataFrame | None,
                     keys: tuple[str, ...] = SEQ_KEY) -> pd.DataFrame:
    """t_send_us from the publisher's log, else from the payload; t_send_source says which."""
    if pub_log is not None:
        pm = pm.merge(pub_log.drop_duplicates(list(keys))[[*keys, "t_send_us"]], on=list(keys), how="outer")
        payload_t = pm["payload_t_send_us"].fillna(pm["out_payload_t_send_us"])
        from_log = pm["t_send_us"].notna()
        pm["t_send_us"] = pm["t_send_us"].fillna(payload_t)  # a line the publisher never wrote
    else:
        from_log = pd.Series(False, index=pm.index)
        pm["t_send_us"] = pm["payload_t_send_us"].fillna(pm["out_payload_t_send_us"])
    source = pd.Series(None, index=pm.index, dtype=object)
    source[pm["t_send_us"].notna().to_numpy()] = "payload"
    source[from_log.to_numpy()] = "publisher log"
    pm["t_send_source"] = source
    return pm


def _with_receive_times(pm: pd.DataFrame, sub_log: pd.DataFrame | None,
                        keys: tuple[str, ...] = SEQ_KEY) -> pd.DataFrame:
    """t_recv_us, recv_count and dup from the subscriber's log (without it: counted on the capture)."""
    if sub_log is not None:
        first = sub_log.drop_duplicates(list(keys))[[*keys, "t_recv_us"]]
        counts = sub_log.groupby(list(keys)).agg(recv_count=("seq", "size"), dup=("dup", "max")).reset_index()
        return pm.merge(first, on=list(keys), how="outer").merge(counts, on=list(keys), how="left")
    pm["t_recv_us"] = pd.NA
    pm["recv_count"] = pm["broker_out_us"].notna().astype("int64")
    pm["dup"] = pd.NA
    return pm


def per_message_table(inb: pd.DataFrame, outb: pd.DataFrame, pub_log: pd.DataFrame | None,
                      sub_log: pd.DataFrame | None, warnings: list[str],
                      keys: tuple[str, ...] = SEQ_KEY) -> pd.DataFrame:
    """One row per key (seq; in a fleet (device, seq), with a ``device`` column first): send, broker in/out,
    receive times, lengths, delay, TLS overhead."""
    inb, outb = _first_per_seq(inb, outb, warnings, keys)
    pm = _with_receive_times(_with_send_times(_legs_by_seq(inb, outb, keys), pub_log, keys), sub_log, keys)
    pm = pm.drop(columns=["out_payload_t_send_us"]).sort_values(list(keys), kind="stable").reset_index(drop=True)
    for col in PER_MESSAGE_INT:
        pm[col] = pd.array(pm[col], dtype="Int64") if col in pm else pd.NA
    pm["recv_count"] = pm["recv_count"].fillna(0)
    pm["delay_ms"] = (pm["t_recv_us"] - pm["t_send_us"]).astype("Float64") / 1000
    pm["broker_transit_ms"] = (pm["broker_out_us"] - pm["broker_in_us"]).astype("Float64") / 1000
    # the first copy of the PUBLISH's segment the broker-side capture saw, minus the payload's send time
    pm["uplink_ms"] = (pm["broker_in_us"] - pm["t_send_us"]).astype("Float64") / 1000
    pm["tls_overhead"] = pm["tls_record_len"] + TLS_RECORD_HEADER - pm["mqtt_len"]
    ws = [c for c in ("ws_header_len", "out_ws_header_len") if c in pm.columns]  # a websocket cell's: last
    if ws:
        pm["tls_overhead"] -= pm["ws_header_len"]  # the frame header is its own layer, inside the TLS record
    return pm[[*(k for k in keys if k != "seq"), *PER_MESSAGE_COLUMNS, *ws]]
