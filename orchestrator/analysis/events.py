"""What a cell's events cost (issue 27 part 3), from the capture: its events (cell.json ``events``: a broker restart or
kill, a link down for D seconds, as measure/events.py ran them) against its connections (connections.csv, each
connection's SYN, CONNACK and end on the wire, its handshake kind, its device) and its messages (per_message:
each reading's arrival at the broker on the capture, ``broker_in_us``, and at the subscriber).

Per event, over the devices of the cell:

- ``reconnected_s``: from the event's start (the restart asked; the link dropped) to each device's first CONNACK
  on a connection opened after it; a device whose connection outlived the event (a link down shorter than what
  ends a connection) counts as ``kept_connection`` instead.
- ``publishing_s``: from the event's start to each device's first PUBLISH reaching the broker after the event is
  over (the new broker process listens; the link is restored) and, when it connected again, after that CONNACK
  (a PUBLISH written into the dead connection still crosses the capture; the broker's kernel answers it with RST).
  Both as n, p50, p99 and max (seconds), with the devices that never came back within the cell (``not_back``).
- ``handshakes_before`` / ``_during`` / ``_after``: the connections opened between the previous event (or the
  first SYN) and this one's start, until it is over (a connection opened then may still reach the old broker
  process), and from then to the next event (or the capture's end), by the kind the wire shows;
  ``first_after`` the same count over each device's first connection opened after the event's start and not
  cut by it (one to the new broker process: ended no earlier than the event was over, or by the device's own
  FIN), with its
  ``resumption_hit_rate_first_after`` (after a restart: did any resumption survive it?), and the
  ``resumption_hit_rate`` of the later ones: resumed / (resumed + full) among connections not a device's first.
- ``messages``: the readings sent from the event's start to the next event: delivered on time, delivered
  ``late`` (their PUBLISH reached the broker more than ``LATE_MS`` after the device handed it over: held by TCP
  through the outage, or sent again with DUP), and ``lost`` with where the capture last saw them; when the
  subscriber subscribed again (``subscriber_back_s``: a restarted broker forgot its subscription) and the readings
  the broker got before that and forwarded to nobody (``lost_before_subscriber_back``).

``broker_dropped_outgoing``: the broker log's lines saying a client's outgoing queue was full (Mosquitto's
max_queued_messages: readings that reached it and went to nobody). The ``timeline`` (bins of ``BIN_S``): devices
connected (a CONNACK seen, no FIN/RST yet), connections opened by handshake kind, readings arriving at the broker,
and the broker's CPU in cores from its stats series.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

LATE_MS = 1000.0
MQTT_SUBSCRIBE = 8
BIN_S = 1.0
KINDS = ("full", "resumed-id", "resumed-ticket", "resumed-psk", "unknown")


def event_start(ev: Mapping[str, Any]) -> float:
    return float(ev.get("t_down") or ev.get("t_start") or ev["at_epoch"])


def event_over(ev: Mapping[str, Any]) -> float:
    return float(ev.get("t_up") or ev.get("broker_back") or ev.get("t_end") or event_start(ev))


def spread(values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """n, p50, p99, max of durations in seconds (None when there are none)."""
    v = np.sort(np.asarray(values, dtype=float))
    if len(v) == 0:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": int(len(v)), "p50": round(float(np.percentile(v, 50)), 3),
            "p99": round(float(np.percentile(v, 99)), 3), "max": round(float(v[-1]), 3)}


def kind_counts(conns: pd.DataFrame) -> dict[str, int]:
    counts = conns["handshake"].fillna("unknown").astype(str).value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def hit_rate(conns: pd.DataFrame) -> float | None:
    kinds = conns["handshake"].fillna("unknown").astype(str)
    resumed = int(kinds.str.startswith("resumed").sum())
    full = int((kinds == "full").sum())
    return round(resumed / (resumed + full), 4) if resumed + full else None


def _devices(pm: pd.DataFrame) -> list[str]:
    return sorted(pm["device"].astype(str).unique()) if "device" in pm else [""]


def _recovery(ev: Mapping[str, Any], conns: pd.DataFrame, pm: pd.DataFrame, devices: list[str]) -> dict[str, Any]:
    t, over = event_start(ev), event_over(ev)
    after = conns[(conns["syn_time"] >= t) & conns["connack_time"].notna()]
    first_connack = after.groupby("device")["connack_time"].min()
    spans = conns[(conns["syn_time"] < t) & ((conns["end_time"].isna()) | (conns["end_time"] > over))]
    kept = set(spans["device"].astype(str)) - set(first_connack.index.astype(str))
    # publishing again: the first reading at the broker once the event is over and, for a device that connected
    # again, on its new connection (a PUBLISH written into the dead one still crosses the capture, and is lost)
    arrived = pm[pm["broker_in_us"].notna()]
    device = arrived["device"].astype(str) if "device" in arrived else pd.Series("", index=arrived.index)
    since = device.map(first_connack.rename(index=str)).fillna(over).clip(lower=over)
    arrived = arrived[arrived["broker_in_us"].astype(float) / 1e6 >= since]
    first_pub = arrived.groupby(device[arrived.index])["broker_in_us"].min()
    reconnected = [float(first_connack[d]) - t for d in first_connack.index if str(d) in devices]
    publishing = [float(first_pub[d]) / 1e6 - t for d in first_pub.index if str(d) in devices]
    return {"reconnected_s": spread(reconnected), "kept_connection": len(kept),
            "publishing_s": spread(publishing), "not_back": len(devices) - len(publishing)}


def _handshakes(t: float, over: float, prev: float, nxt: float, conns: pd.DataFrame) -> dict[str, Any]:
    before = conns[(conns["syn_time"] >= prev) & (conns["syn_time"] < t)]
    during = conns[(conns["syn_time"] >= t) & (conns["syn_time"] < over)]
    after = conns[(conns["syn_time"] >= over) & (conns["syn_time"] < nxt)]
    # each device's first connection after the event that it outlived: opened from its start (a connection opened
    # while the old broker process was still ending is cut by it, and excluded), its handshake on the wire
    since = conns[(conns["syn_time"] >= t) & (conns["syn_time"] < nxt)]
    since = since[since["device"].astype(str) != "unattributed"]
    # cut: ended before the event was over, and not by the device's own FIN (a device that finished its connection
    # to the new process before the orchestrator saw that process back: 20 ms after it listened, in a CI run)
    cut = (since["end_time"] < over) & (since["tcp_end"].astype(str) != "FIN client") if "tcp_end" in since \
        else since["end_time"] < over
    lasted = since[(since["handshake"].fillna("unknown") != "unknown") & ~cut]
    firsts = lasted.sort_values("syn_time").drop_duplicates("device")
    attributed = after[after["device"].astype(str) != "unattributed"]
    later = attributed[(attributed["device_conn"] > 0) & ~attributed.index.isin(firsts.index)]
    return {"handshakes_before": kind_counts(before), "handshakes_during": kind_counts(during),
            "handshakes_after": kind_counts(after), "first_after": kind_counts(firsts),
            "resumption_hit_rate_first_after": hit_rate(firsts[firsts["device_conn"] > 0]),
            "resumption_hit_rate": hit_rate(later),
            "resumption_hit_rate_before": hit_rate(before[before["device_conn"] > 0])}


def _span(broker_in_us: pd.Series) -> list[float] | None:
    """When the readings the broker got but never forwarded arrived (epoch s): e.g. while no subscriber was back."""
    v = broker_in_us.dropna().astype(float) / 1e6
    return [round(float(v.min()), 6), round(float(v.max()), 6)] if len(v) else None


def reading_fates(pm: pd.DataFrame) -> dict[str, Any]:
    """Readings sent: delivered on time, late (PUBLISH at the broker > LATE_MS after the device sent it), lost (where
    the capture last saw them); per device the most lost and late."""
    sent = pm[pm["t_send_us"].notna()]
    received = sent["recv_count"].fillna(0).astype(float) > 0
    uplink_ms = (sent["broker_in_us"].astype(float) - sent["t_send_us"].astype(float)) / 1000.0
    late = received & (uplink_ms > LATE_MS)
    lost = ~received
    on_in = sent["broker_in_us"].notna()
    on_out = sent["broker_out_us"].notna() if "broker_out_us" in sent else on_in & False
    device = sent["device"].astype(str) if "device" in sent else pd.Series("", index=sent.index)
    per_dev = pd.DataFrame({"lost": lost, "late": late, "device": device}).groupby("device").sum()
    return {"sent": int(len(sent)), "delivered": int(received.sum()), "late": int(late.sum()),
            "lost": int(lost.sum()), "lost_not_on_capture": int((lost & ~on_in).sum()),
            "lost_at_broker": int((lost & on_in & ~on_out).sum()), "lost_after_broker": int((lost & on_out).sum()),
            "late_uplink_s": spread(uplink_ms[late] / 1000.0),
            "lost_at_broker_arrived": _span(sent["broker_in_us"][lost & on_in & ~on_out]),
            "devices_with_loss": int((per_dev["lost"] > 0).sum()), "most_lost_by_one_device": int(
                per_dev["lost"].max()) if len(per_dev) else 0,
            "devices_with_late": int((per_dev["late"] > 0).sum()), "most_late_by_one_device": int(
                per_dev["late"].max()) if len(per_dev) else 0, "late_ms_threshold": LATE_MS}


def timeline(conns: pd.DataFrame, pm: pd.DataFrame, cpu_series: Sequence[Sequence[float]] | None,
             start: float, end: float) -> dict[str, Any]:
    """Per bin: devices connected at its middle, connections opened by kind, readings at the broker, broker cores."""
    edges = np.arange(start, end + BIN_S, BIN_S)
    mids = edges[:-1] + BIN_S / 2
    up = conns[conns["connack_time"].notna()]
    ends = up["end_time"].fillna(np.inf).to_numpy(dtype=float)
    connack = up["connack_time"].to_numpy(dtype=float)
    dev = up["device"].astype(str).to_numpy()
    connected = [len(set(dev[(connack <= m) & (ends > m)])) for m in mids]
    opened = {k: np.histogram(part["syn_time"].to_numpy(dtype=float), bins=edges)[0].tolist()
              for k, part in conns.groupby(conns["handshake"].fillna("unknown").astype(str))}
    arrivals = pm["broker_in_us"].dropna().to_numpy(dtype=float) / 1e6
    out: dict[str, Any] = {"bin_s": BIN_S, "t0": start, "t": [round(float(m - start), 3) for m in mids],
                           "connected": connected, "handshakes": opened,
                           "readings": np.histogram(arrivals, bins=edges)[0].tolist(), "broker_cores": None}
    if cpu_series and len(cpu_series) >= 2:
        ts = np.array([r[0] for r in cpu_series], dtype=float)
        cpu = np.array([r[1] for r in cpu_series], dtype=float)
        cores = np.diff(cpu) / 1e9 / np.maximum(np.diff(ts), 1e-6)
        at = (ts[1:] + ts[:-1]) / 2
        keep = (at >= start) & (at <= end)
        out["broker_cores"] = {"t": [round(float(x - start), 3) for x in at[keep]],
                               "cores": [round(float(c), 4) for c in cores[keep]]}
    return out


def subscribes(per_packet: pd.DataFrame) -> np.ndarray:
    """The subscriber's SUBSCRIBE packets on the capture (epoch s): when it was back after a broker restart."""
    if per_packet.empty or "mqtt_type" not in per_packet:
        return np.array([])
    up = per_packet[per_packet["leg"] == "subscriber->broker"]
    has = up["mqtt_type"].fillna("").astype(str).str.contains(rf"(?:^|,){MQTT_SUBSCRIBE}(?:\.0)?(?:,|$)")
    return np.sort(up.loc[has, "time"].to_numpy(dtype=float))


def _subscriber(ev: Mapping[str, Any], subscribed: np.ndarray, window: pd.DataFrame) -> dict[str, Any]:
    """When the subscriber subscribed again after the event (a restarted broker forgot it) and how many readings
    the broker got but forwarded to nobody before that."""
    again = subscribed[subscribed >= event_start(ev)]
    if not len(again):
        return {"subscriber_back_s": None, "lost_before_subscriber_back": None}
    back = float(again[0])
    no_one = (window["recv_count"].fillna(0).astype(float) == 0) & window["broker_in_us"].notna() & (
        window["broker_in_us"].astype(float) / 1e6 < back)
    return {"subscriber_back_s": round(back - event_start(ev), 3), "lost_before_subscriber_back": int(no_one.sum())}


DROPPED = "Outgoing messages are being dropped for client"  # Mosquitto: a client's queue is full


def broker_drops(log_text: str) -> list[str]:
    """The broker log's lines saying it dropped a client's outgoing messages (its max_queued_messages reached: a
    reading that reached the broker and was forwarded to nobody)."""
    return [line.strip() for line in log_text.splitlines() if DROPPED in line]


def events_metrics(events: list[dict[str, Any]], conns: pd.DataFrame, pm: pd.DataFrame,
                   cpu_series: Sequence[Sequence[float]] | None, subscribed: np.ndarray | None = None,
                   broker_log: str = "") -> dict[str, Any]:
    """metrics.json ``events``: each event's recovery, handshakes and messages, and the cell's timeline."""
    ran = sorted((e for e in events if "t_start" in e), key=event_start)
    if "device" not in pm:  # one device (a run without --devices): every connection is its own, none named
        conns = conns.assign(device="")
    devices = _devices(pm)
    first_syn = float(conns["syn_time"].min()) if len(conns) else min(event_start(e) for e in ran)
    arrivals = pm["broker_in_us"].dropna().astype(float) / 1e6
    last = max(float(arrivals.max()) if len(arrivals) else first_syn, float(conns["syn_time"].max()))
    per_event = []
    for i, ev in enumerate(ran):
        t = event_start(ev)
        prev = event_start(ran[i - 1]) if i else first_syn
        nxt = event_start(ran[i + 1]) if i + 1 < len(ran) else np.inf
        sent = pm["t_send_us"].astype(float) / 1e6
        window = pm[(sent >= t - LATE_MS / 1000.0) & (sent < nxt)]
        per_event.append({"kind": ev["kind"], "at_s": ev["at_s"], "duration_s": ev.get("duration_s", 0.0),
                          "start": round(t, 6), "over": round(event_over(ev), 6), "error": ev.get("error"),
                          **_recovery(ev, conns, pm, devices), **_handshakes(t, event_over(ev), prev, nxt, conns),
                          "messages": reading_fates(window),
                          **_subscriber(ev, subscribed if subscribed is not None else np.array([]), window)})
    return {"devices": len(devices), "events": per_event, "messages": reading_fates(pm),
            "broker_dropped_outgoing": broker_drops(broker_log)[:20],
            "timeline": timeline(conns, pm, cpu_series, first_syn, last)}
