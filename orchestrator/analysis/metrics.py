"""Every per-run metric of MEASUREMENT.md, as pure functions over the tables.

Values that cannot be computed are None (JSON null), never a made-up number.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from orchestrator.analysis import segments

# One definition per metric (MEASUREMENT.md), written into metrics.json so reports quote this source.
DEFINITIONS: dict[str, str] = {
    "delay_ms": "t_recv (subscriber log) - t_send (publisher log, else the payload's t), first arrival "
                "of each seq; only when the clocks are shared or synchronised; negative values kept, counted",
    "broker_transit_ms": "capture time of the PUBLISH leaving the broker to the subscriber - capture time "
                         "of the same PUBLISH arriving from the publisher (one clock: the capture's)",
    "uplink_ms": "broker-side capture time of the first copy of the segment carrying a PUBLISH - its "
                 "t_send (publisher log, else the payload's t); the publisher->broker link alone, only when "
                 "the clocks are shared or synchronised; robust_spread = MAD x 1.4826",
    "jitter_ms": "mean |d(i+1) - d(i)| over delays in sequence order; std = sample std of delay",
    "throughput": "wire bytes (every frame, all headers) of the publisher->broker direction between the "
                  "first and the last PUBLISH of the run (inclusive) x 8 / that window; goodput: payload "
                  "bytes",
    "loss": "(N - unique seqs received) / N; duplicates = arrivals of an already received seq; "
            "out_of_order = first arrivals whose seq is below one received before; TCP retransmissions "
            "from tshark's analysis",
    "overhead_bytes": "medians per PUBLISH of the publisher->broker leg; tls_overhead = tls_record_len + 5 "
                      "- mqtt_len; tcp_payload_len, frame_len and per_layer use only PUBLISH alone in their "
                      "TCP segment (a shared segment's lengths belong to all its messages); mqtt_len and "
                      "tls_record_len are each message's own (records pair 1:1 with messages)",
    "handshake": "publisher session at the capture point: SYN -> handshake-completing ACK; ClientHello -> "
                 "later Finished; CONNECT -> CONNACK; wire bytes each way up to and including CONNACK",
}

STAT_KEYS = ("n", "mean", "median", "p95", "p99", "min", "max", "std", "ci95_low", "ci95_high",
             "negative_count")


def _f(x: Any) -> float | None:
    """Plain float or None (NaN, None, pd.NA -> None)."""
    if x is None or x is pd.NA:
        return None
    v = float(x)
    return None if math.isnan(v) or math.isinf(v) else v


def describe(values: np.ndarray | pd.Series) -> dict[str, Any]:
    """Summary statistics, 95 % CI of the mean (Student t), count of negative values."""
    v = np.asarray(pd.Series(values, dtype="float64").dropna(), dtype="float64")
    n = int(v.size)
    out: dict[str, Any] = {"available": n > 0, "n": n}
    if n == 0:
        out.update({k: None for k in STAT_KEYS if k != "n"})
        return out
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if n > 1 else None
    half = (float(special.stdtrit(n - 1, 0.975)) * std / math.sqrt(n)) if std is not None else None
    out.update({
        "mean": mean, "median": float(np.median(v)),
        "p95": float(np.percentile(v, 95)), "p99": float(np.percentile(v, 99)),
        "min": float(v.min()), "max": float(v.max()), "std": std,
        "ci95_low": mean - half if half is not None else None,
        "ci95_high": mean + half if half is not None else None,
        "negative_count": int((v < 0).sum()),
    })
    return out


def robust_spread(values: np.ndarray | pd.Series) -> float | None:
    """Median absolute deviation x 1.4826: the standard deviation of a normal sample, robust to outliers."""
    v = np.asarray(pd.Series(values, dtype="float64").dropna(), dtype="float64")
    return float(np.median(np.abs(v - np.median(v))) * 1.4826) if v.size else None


def unavailable_stats(reason: str) -> dict[str, Any]:
    out: dict[str, Any] = {"available": False, "reason": reason}
    out.update({k: None for k in STAT_KEYS})
    return out


def jitter(per_message: pd.DataFrame, by: str | None = None) -> dict[str, Any]:
    """Mean absolute difference of consecutive delays in sequence order, and std of delay.

    ``by`` (a fleet: "device"): consecutive within each device's own sequence, pooled over devices."""
    if by is None:
        d = per_message.sort_values("seq")["delay_ms"].astype("float64").dropna().to_numpy()
        return {
            "mean_abs_diff": float(np.abs(np.diff(d)).mean()) if d.size > 1 else None,
            "std": float(d.std(ddof=1)) if d.size > 1 else None,
            "n": int(d.size),
        }
    pm = per_message.sort_values([by, "seq"], kind="stable")
    pm = pm[pm["delay_ms"].notna().to_numpy()]
    d = pm["delay_ms"].to_numpy(dtype="float64")
    group = pm[by].to_numpy()
    steps = np.abs(np.diff(d))[group[1:] == group[:-1]] if d.size > 1 else np.empty(0)
    return {"mean_abs_diff": float(steps.mean()) if steps.size else None,
            "std": float(d.std(ddof=1)) if d.size > 1 else None, "n": int(d.size), "within": by}


def throughput(packets: pd.DataFrame, inbound: pd.DataFrame, pub_streams: set[int],
               broker_port: int) -> dict[str, Any]:
    """Wire and payload bits of the publisher->broker direction over first..last PUBLISH."""
    if inbound.empty:
        return {"window_s": None, "wire_bytes": None, "wire_bps": None, "payload_bytes": None,
                "goodput_bps": None, "frames": None, "first_publish_time": None, "last_publish_time": None}
    t0, t1 = float(inbound["time"].min()), float(inbound["time"].max())
    sel = (packets["dst_port"] == broker_port) & packets["stream"].isin(pub_streams) \
        & (packets["time"] >= t0) & (packets["time"] <= t1)
    wire = int(packets.loc[sel, "frame_len"].sum())
    payload = int(inbound["payload_len"].fillna(0).sum())
    span = t1 - t0
    return {
        "window_s": span,
        "wire_bytes": wire,
        "wire_bps": wire * 8 / span if span > 0 else None,
        "payload_bytes": payload,
        "goodput_bps": payload * 8 / span if span > 0 else None,
        "frames": int(sel.sum()),
        "first_publish_time": t0,
        "last_publish_time": t1,
    }


def loss(sub_log: pd.DataFrame | None, samples_expected: int, *,
         out_seqs: pd.Series | None = None) -> dict[str, Any]:
    """Loss, duplicates and out-of-order arrivals, each counted separately.

    From the subscriber log in arrival order when there is one, else from the broker->subscriber
    leg of the capture. ``duplicates``: arrivals of an already received seq; ``out_of_order``: first
    arrivals whose seq is lower than one received before; ``unexpected``: seqs outside 0..N-1.
    """
    if sub_log is not None:
        seqs, source = sub_log["seq"].to_numpy(dtype=np.int64), "subscriber log"
    elif out_seqs is not None:
        seqs, source = out_seqs.dropna().to_numpy(dtype=np.int64), "capture (broker->subscriber)"
    else:
        return {"sent": samples_expected, "received_unique": None, "loss_pct": None, "duplicates": None,
                "out_of_order": None, "unexpected": None, "received_total": None, "source": None}
    first = ~pd.Series(seqs).duplicated().to_numpy()
    uniq = seqs[first]
    in_range = (uniq >= 0) & (uniq < samples_expected)
    prior_max = np.maximum.accumulate(np.concatenate([[-1], uniq]))[:-1]
    received = int(in_range.sum())
    return {
        "sent": samples_expected,
        "received_unique": received,
        "loss_pct": (samples_expected - received) / samples_expected * 100 if samples_expected > 0 else None,
        "duplicates": int((~first).sum()),
        "out_of_order": int((uniq < prior_max).sum()),
        "unexpected": int((~in_range).sum()),
        "received_total": int(seqs.size),
        "source": source,
    }


def fleet_loss(sub_log: pd.DataFrame | None, samples_per_device: int, devices: int, *,
               out_keys: pd.DataFrame | None = None) -> dict[str, Any]:
    """:func:`loss` for a fleet, a message being (device, seq): N = devices x samples per device.

    ``duplicates``: arrivals of an already received (device, seq); ``out_of_order``: first arrivals
    whose seq is lower than one received before FROM THE SAME DEVICE; ``unexpected``: a seq outside
    0..samples-1 or no device id. From the subscriber log (its ``device`` column) when there is one,
    else from the broker->subscriber leg of the capture (``out_keys``: device, seq).
    """
    expected = samples_per_device * devices
    if sub_log is not None:
        keys, source = sub_log[["device", "seq"]], "subscriber log"
    elif out_keys is not None:
        keys, source = out_keys[["device", "seq"]].dropna(), "capture (broker->subscriber)"
    else:
        return {"sent": expected, "received_unique": None, "loss_pct": None, "duplicates": None,
                "out_of_order": None, "unexpected": None, "received_total": None, "source": None,
                "devices": devices, "samples_per_device": samples_per_device}
    dev = keys["device"].astype("str").to_numpy()
    seq = keys["seq"].to_numpy(dtype=np.int64)
    first = ~keys.duplicated().to_numpy()
    uniq = pd.DataFrame({"device": dev[first], "seq": seq[first]})
    in_range = ((uniq["seq"] >= 0) & (uniq["seq"] < samples_per_device) & (uniq["device"] != "")).to_numpy()
    prior_max = uniq.groupby("device", sort=False)["seq"].cummax().groupby(uniq["device"], sort=False).shift(1)
    received = int(in_range.sum())
    return {
        "sent": expected,
        "received_unique": received,
        "loss_pct": (expected - received) / expected * 100 if expected > 0 else None,
        "duplicates": int((~first).sum()),
        "out_of_order": int((uniq["seq"] < prior_max.fillna(-1)).sum()),
        "unexpected": int((~in_range).sum()),
        "received_total": int(seq.size),
        "source": source,
        "devices": devices,
        "samples_per_device": samples_per_device,
    }


def resent(packets: pd.DataFrame) -> pd.Series:
    """Data segments carrying bytes an earlier segment of the same direction of their stream carried.

    Our own rule, not tshark's label: tshark calls a resend that follows its predecessor within
    its out-of-order threshold (3 ms, or the handshake RTT) "out-of-order", and on a LAN-speed
    link a fast retransmission nearly always does. The bytes seen so far are kept as a union of
    ranges, so an original overtaken by later segments (a delay that reorders) is not a resend.
    Valid where the capture sees the sender's originals (the broker-side capture with loss
    injected at the broker's ingress).

    A segment starting at or after the end of every earlier one of its direction carries nothing seen
    before; only the directions holding some other segment are walked with the union of ranges.
    """
    stream, port = packets["stream"].to_numpy(dtype=float), packets["src_port"].to_numpy(dtype=float)
    seq, length = packets["tcp_seq"].to_numpy(dtype=float), packets["tcp_len"].to_numpy(dtype=float)
    rows = np.flatnonzero((length > 0) & ~np.isnan(seq) & ~np.isnan(stream) & ~np.isnan(port))
    rows = rows[np.lexsort((packets["frame"].to_numpy()[rows], port[rows], stream[rows]))]
    start, end = seq[rows], seq[rows] + length[rows]
    new_direction = np.ones(len(rows), dtype=bool)
    new_direction[1:] = (stream[rows][1:] != stream[rows][:-1]) | (port[rows][1:] != port[rows][:-1])
    direction = np.cumsum(new_direction) - 1
    prior_end = pd.Series(end).groupby(direction).cummax().groupby(direction).shift(1).to_numpy()
    flag = np.zeros(len(packets), dtype=bool)
    bounds = np.append(np.flatnonzero(new_direction), len(rows))
    for d in np.unique(direction[start < prior_end]).tolist():  # NaN (a direction's first) compares False
        seen = segments.ByteRanges()
        part = slice(bounds[d], bounds[d + 1])
        flag[rows[part]] = [seen.add(a, b) for a, b in zip(start[part].tolist(), end[part].tolist(), strict=True)]
    return pd.Series(flag, index=packets.index)


def retransmissions(packets: pd.DataFrame, streams: set[int], broker_port: int) -> dict[str, Any]:
    sel = packets["stream"].isin(streams)
    data = sel & (packets["tcp_len"] > 0)
    to_broker = sel & (packets["dst_port"] == broker_port)
    again = resent(packets)
    fates = segments.broker_losses(packets, streams, broker_port)
    return {
        # data transmissions towards the broker (first sends + resends) the broker's ACKs show it did not get
        "tcp_segments_lost_to_broker": fates["tcp_copies_lost_to_broker"],
        "tcp_transmissions_to_broker": fates["tcp_copies_to_broker"],
        "tcp_loss_runs_to_broker": fates["tcp_loss_runs_to_broker"],
        "tcp_loss_run_mean": fates["tcp_loss_run_mean"],
        "tcp_loss_run_max": fates["tcp_loss_run_max"],
        "tcp_retransmissions": int((data & again).sum()),
        "tcp_retransmissions_to_broker": int((data & to_broker & again).sum()),
        "tcp_data_segments": int(data.sum()),
        # first transmissions of data towards the broker: the denominator of its retransmission rate
        "tcp_data_segments_to_broker": int((data & to_broker & ~again).sum()),
        "tcp_retransmissions_tshark_label": int((sel & packets["retrans"]).sum()),
    }


def overhead(inbound: pd.DataFrame, tls: bool) -> tuple[dict[str, Any], list[str]]:
    """Medians per PUBLISH of the publisher->broker leg, over messages alone in their frame."""
    warnings: list[str] = []
    alone = inbound[inbound["msgs_in_frame"] == 1]
    shared = len(inbound) - len(alone)
    if shared:
        warnings.append(f"{shared} of {len(inbound)} PUBLISH shared a TCP segment with other MQTT messages: "
                        "their tcp_payload_len/frame_len are the whole segment's; overhead medians use only "
                        "PUBLISH alone in their segment")

    def med(col: str, frame: pd.DataFrame = alone) -> float | None:
        s = frame[col].astype("float64").dropna()
        return float(s.median()) if len(s) else None

    ws = _ws_headers(inbound)  # MQTT over WebSocket: its frame header is a layer of its own, under TLS
    tls_over = (inbound["tls_record_len"].astype("float64") + 5
                - inbound["mqtt_len"].astype("float64") - (ws if ws is not None else 0)).dropna()
    net = alone["frame_len"].astype("float64") - alone["tcp_hdr_len"] - alone["tcp_len"]
    link = net - alone["ip_hdr_len"]
    payload_med = med("payload_len", inbound)
    mqtt_med = med("mqtt_len", inbound)
    per_layer = {
        "ethernet": _f(link.median()) if len(link.dropna()) else None,
        "ip": med("ip_hdr_len"),
        "tcp": med("tcp_hdr_len"),
        "tls": float(tls_over.median()) if tls and len(tls_over) else (0.0 if not tls else None),
        **({"websocket": _f(ws.median())} if ws is not None else {}),
        "mqtt_header": (mqtt_med - payload_med) if mqtt_med is not None and payload_med is not None else None,
        "payload": payload_med,
    }
    return {
        "n_publish": int(len(inbound)),
        "n_alone_in_frame": int(len(alone)),
        "mqtt_len": mqtt_med,
        "tls_record_len": med("tls_record_len", inbound) if tls else None,
        "tls_overhead": float(tls_over.median()) if tls and len(tls_over) else None,
        "tcp_payload_len": med("tcp_len"),
        "frame_len": med("frame_len"),
        "tls_overhead_values": sorted({int(v) for v in tls_over.unique()}) if tls else [],
        "per_layer": per_layer,
        **({"websocket_header_values": sorted({int(v) for v in ws.dropna().unique()}),
            "websocket_unpaired": int(ws.isna().sum())} if ws is not None else {}),
    }, warnings


def _ws_headers(inbound: pd.DataFrame) -> pd.Series | None:
    """Each PUBLISH's WebSocket frame header bytes (messages.py ws_header_lengths); None without WebSocket. Over
    WebSocket the overhead's per_layer has ``websocket`` (the header: 2 B + 4 B of mask key, + 2 B of length over
    125 B) and its TLS overhead is tls_record_len + 5 - mqtt_len - that header."""
    if "ws_header_len" not in inbound.columns or not inbound["ws_header_len"].notna().any():
        return None
    return inbound["ws_header_len"].astype("float64")


def study_compatible(inbound: pd.DataFrame, packets: pd.DataFrame, run_streams: set[int],
                     sent: int | None, received_total: int | None) -> dict[str, Any]:
    """The study's Wireshark-style figures, labelled: NOT one-way delay."""
    frames = inbound.drop_duplicates("frame")
    n = len(frames)
    span = float(frames["time"].max() - frames["time"].min()) if n > 1 else None
    run_pk = packets[packets["stream"].isin(run_streams)]
    cap_span = float(run_pk["time"].max() - run_pk["time"].min()) if len(run_pk) > 1 else None
    cap_bytes = int(run_pk["frame_len"].sum())
    return {
        "mean_interarrival_ms": span * 1000 / (n - 1) if span is not None else None,
        "throughput_bps": cap_bytes * 8 / cap_span if cap_span else None,
        "captured_bytes": cap_bytes,
        "capture_span_s": cap_span,
        "loss_pct": (sent - received_total) / sent * 100 if sent and received_total is not None else None,
        "note": ("Study-compatible definitions: mean_interarrival_ms = span of the frames carrying PUBLISH "
                 "(publisher->broker) / (frames - 1), an inter-arrival time, NOT one-way delay; "
                 "throughput_bps = all captured bytes of the run's TCP sessions x 8 / their time span; "
                 "loss_pct = (sent - received) / sent with every received line counted."),
    }
