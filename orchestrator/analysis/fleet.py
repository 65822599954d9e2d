"""A fleet's own figures (--devices N > 1): devices.csv, one row per device, and metrics.json ``fleet``.

A message is (device, seq). ``sent``: the (device, seq) in that device's send log (logs/fleet/<device>.csv);
``received``: those the subscriber logged at least once; ``lost``: sent and never received. Each lost message
is placed by what the broker-side capture shows of it: ``not on capture`` (it never reached the broker's
interface), ``reached broker, not forwarded`` (on the publisher->broker leg only) or ``forwarded, not
received`` (the broker sent it to the subscriber, whose log lacks it).

Schedule lag and the one verdict on the loader (steady phase and connect phase, per host): analysis/fleetlag.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis import metrics
from orchestrator.analysis.fleetlag import DEFINITION as LAG_DEFINITION
from orchestrator.analysis.fleetlag import Outages, device_lags, nearest_rank, schedule_lag
from orchestrator.analysis.logs import FLEET_CONNECTIONS

CONNECTIONS = FLEET_CONNECTIONS  # logs/fleet/connections.csv: a row per device
SUMMARY = "summary.json"  # logs/fleet/summary.json: the loader's own figures

# one-way delay histogram: FIXED log-spaced edges, 0.01 ms .. 10 s, 10 bins a decade (repeats add up)
DELAY_EDGES_MS: tuple[float, ...] = tuple(float(f"{v:.6g}") for v in np.logspace(-2, 4, 61))
LOST_SEQS_SHOWN = 20
ERRORS_SHOWN = 10
SETUP = ("tcp_connect_ms", "handshake_ms", "connack_ms")
CONNECTION_COLUMNS = ("device", "t_start_us", *SETUP, "messages", "error")
NOT_ON_CAPTURE = "not on capture"
NOT_FORWARDED = "reached broker, not forwarded"
NOT_RECEIVED = "forwarded, not received"
LOST_AT = (NOT_ON_CAPTURE, NOT_FORWARDED, NOT_RECEIVED)
REFUSED = "ConnackRefused"  # the core's name: a CONNACK came, refusing the device (not connected)
DEVICE_COLUMNS = ("device", "sent", "received", "lost", "lost_seqs", "lost_at", "connected", "error",
                  "t_start_us", *SETUP, "lag_p50_us", "lag_p99_us", "lag_max_us", "steady_p99_us",
                  "delay_median_ms")
LAG_COLUMNS = ("lag_p50_us", "lag_p99_us", "lag_max_us", "steady_p99_us")
DEFINITIONS = {
    "messages": "a message is (device, seq); sent: in the device's send log; delivered: sent and logged by "
                "the subscriber; lost: sent, never received; not_sent: devices x samples - sent",
    "lost_at": "where the broker-side capture last saw a lost message: not on capture / reached broker, "
               "not forwarded / forwarded, not received",
    "one_way_delay_ms": "t_recv - t_send (the send log's actual send time) over every delivered message; "
                        "histogram: fixed log-spaced edges (0.01 ms .. 10 s), so repeats add up",
    "connection_setup_ms": "the loader's own measure of each device's connect: tcp_connect_ms (connect()), "
                           "handshake_ms (TLS ClientHello -> both Finished), connack_ms (CONNECT -> CONNACK)",
    "schedule_lag_us": LAG_DEFINITION,
}


def read_connections(path: Path) -> pd.DataFrame:
    """logs/fleet/connections.csv (an empty table when it is missing); ``error`` "" when the device was fine; its
    ``host`` column kept where a fleet across lab hosts has one."""
    if not path.is_file():
        return pd.DataFrame({c: pd.Series([], dtype=str if c in ("device", "error") else "float64")
                             for c in CONNECTION_COLUMNS})
    frame = pd.read_csv(path, dtype={"device": str, "error": str, "host": str}, keep_default_na=False,
                        na_values={c: [""] for c in ("t_start_us", *SETUP, "messages")})
    for c in ("t_start_us", *SETUP, "messages"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    return frame[[*CONNECTION_COLUMNS, *(["host"] if "host" in frame.columns else [])]]


def read_opens(path: Path) -> pd.DataFrame | None:
    """device, conn, t_open_us of the fleet's connections log (logs/publisher_connections.csv, written when the
    run has a connection lifecycle); None when there is none or it names no device."""
    if not path.is_file():
        return None
    frame = pd.read_csv(path, dtype={"device": str}, keep_default_na=False, na_values={"t_open_us": [""]})
    if not {"device", "conn", "t_open_us"} <= set(frame.columns):
        return None
    frame["t_open_us"] = pd.to_numeric(frame["t_open_us"], errors="coerce")
    return frame[["device", "conn", "t_open_us"]]


def connected(connections: pd.DataFrame) -> pd.Series:
    """A device connected: it got a CONNACK that did not refuse it (the loader's own rule)."""
    return connections["connack_ms"].notna() & (connections["error"].fillna("") != REFUSED)


# ---------------------------------------------------------------- histogram with fixed edges

def histogram(values_ms: np.ndarray | pd.Series, edges: Sequence[float] = DELAY_EDGES_MS) -> dict[str, Any]:
    """Counts over fixed edges; values below the first edge (zero, negative) and from the last one on are
    counted apart, never dropped."""
    v = np.asarray(pd.Series(values_ms, dtype="float64").dropna(), dtype="float64")
    e = np.asarray(edges, dtype="float64")
    inside = (v >= e[0]) & (v < e[-1])
    return {"edges_ms": [float(x) for x in e], "counts": [int(c) for c in np.histogram(v[inside], bins=e)[0]],
            "below": int((v < e[0]).sum()), "above": int((v >= e[-1]).sum()), "n": int(v.size)}


def merge_histograms(hists: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The sum of histograms with the same edges (e.g. a cell's repeats); ValueError when edges differ."""
    if not hists:
        raise ValueError("no histogram to merge")
    edges = hists[0]["edges_ms"]
    if any(h["edges_ms"] != edges for h in hists):
        raise ValueError("histograms with different edges do not add up")
    counts = np.sum([np.asarray(h["counts"], dtype=np.int64) for h in hists], axis=0)
    return {"edges_ms": list(edges), "counts": [int(c) for c in counts],
            "below": sum(int(h["below"]) for h in hists), "above": sum(int(h["above"]) for h in hists),
            "n": sum(int(h["n"]) for h in hists)}


def histogram_quantile(hist: dict[str, Any], q: float) -> float | None:
    """The upper edge of the bin holding the q-quantile (a bound within one bin, 10 bins a decade);
    None when it falls below the first edge or from the last one on."""
    n = int(hist["n"])
    if n == 0:
        return None
    rank = max(1, int(np.ceil(q * n)))
    cum = int(hist["below"]) + np.cumsum(np.asarray(hist["counts"], dtype=np.int64))
    if rank <= int(hist["below"]) or rank > int(cum[-1]):
        return None
    return float(hist["edges_ms"][int(np.searchsorted(cum, rank)) + 1])


# ---------------------------------------------------------------- messages: sent, received, lost

def lost_at(pm: pd.DataFrame) -> np.ndarray:
    """For each row, where the capture last saw the message (meaningful for the lost ones)."""
    on_in = pm["broker_in_us"].notna().to_numpy()
    on_out = pm["broker_out_us"].notna().to_numpy()
    return np.select([on_out, on_in], [NOT_RECEIVED, NOT_FORWARDED], NOT_ON_CAPTURE).astype(object)


def message_fates(pm: pd.DataFrame, send_log: pd.DataFrame | None) -> pd.DataFrame:
    """device, seq, sent, received, lost, lost_at (None when not lost), on_in / on_out (seen on the
    capture's publisher->broker / broker->subscriber leg) per (device, seq) of the table."""
    keys = pm[["device", "seq"]].astype({"device": "str"})
    if send_log is not None and len(send_log):
        logged = send_log[["device", "seq"]].astype({"device": "str"}).drop_duplicates().assign(_sent=True)
        sent = keys.merge(logged, on=["device", "seq"], how="left")["_sent"].fillna(False).astype(bool).to_numpy()
    else:
        sent = np.zeros(len(pm), dtype=bool)
    received = (pm["recv_count"].fillna(0) > 0).to_numpy()
    lost = sent & ~received
    where = lost_at(pm)
    where[~lost] = None
    return pd.DataFrame({"device": keys["device"].to_numpy(), "seq": keys["seq"].to_numpy(), "sent": sent,
                         "received": received, "lost": lost, "lost_at": where,
                         "on_in": pm["broker_in_us"].notna().to_numpy(),
                         "on_out": pm["broker_out_us"].notna().to_numpy()})


def _lost_summary(group: pd.DataFrame) -> tuple[str, str]:
    lost = group[group["lost"]]
    seqs = [str(int(s)) for s in lost["seq"].sort_values()]
    shown = " ".join(seqs[:LOST_SEQS_SHOWN]) + (f" ... ({len(seqs)} in all)" if len(seqs) > LOST_SEQS_SHOWN else "")
    counts = lost["lost_at"].value_counts()
    return shown, "; ".join(f"{k}: {int(counts[k])}" for k in LOST_AT if k in counts)


def device_table(pm: pd.DataFrame, send_log: pd.DataFrame | None, connections: pd.DataFrame) -> pd.DataFrame:
    """devices.csv: one row per device (every device of connections.csv, of the send logs, of the table)."""
    fates = message_fates(pm, send_log)
    by = fates.groupby("device", sort=True)
    table = pd.DataFrame({"sent": by["sent"].sum(), "received": by["received"].sum(), "lost": by["lost"].sum()})
    conn = connections.drop_duplicates("device").set_index("device")
    devices = sorted(set(table.index) | set(conn.index))
    table = table.reindex(devices, fill_value=0).astype("int64")
    table.index.name = "device"
    lossy = fates[fates["lost"]]
    summaries = {d: _lost_summary(g) for d, g in lossy.groupby("device", sort=True)}
    table["lost_seqs"] = [summaries.get(d, ("", ""))[0] for d in devices]
    table["lost_at"] = [summaries.get(d, ("", ""))[1] for d in devices]
    conn = conn.reindex(devices)
    table["connected"] = connected(conn).to_numpy()
    table["error"] = conn["error"].fillna("").to_numpy()
    for c in ("t_start_us", *SETUP):
        table[c] = conn[c].to_numpy()
    table["t_start_us"] = pd.array(table["t_start_us"], dtype="Int64")
    if send_log is not None and len(send_log) and "t_intended_us" in send_log:
        per_device = device_lags(send_log).set_index("device").reindex(devices)
        for c in LAG_COLUMNS:
            table[c] = pd.array(per_device[c].round(), dtype="Int64")
    else:
        for c in LAG_COLUMNS:
            table[c] = pd.array([pd.NA] * len(devices), dtype="Int64")
    delay = pm.assign(_d=pm["delay_ms"].astype("float64")).groupby("device", sort=True)["_d"].median()
    table["delay_median_ms"] = delay.reindex(devices).round(3).to_numpy()
    return table.reset_index()[list(DEVICE_COLUMNS)]


def _failures(connections: pd.DataFrame, summary: dict[str, Any]) -> dict[str, Any]:
    bad = connections[connections["error"].fillna("") != ""]
    listed = summary.get("errors") if isinstance(summary.get("errors"), list) else None
    return {"devices": int(len(bad)), "by_error": {str(k): int(v) for k, v in bad["error"].value_counts().items()},
            "errors": listed if listed is not None else
            [{"device": d, "error": e} for d, e in zip(bad["device"][:ERRORS_SHOWN], bad["error"][:ERRORS_SHOWN],
                                                       strict=True)]}


def _setup(connections: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in SETUP:
        v = np.sort(connections[c].dropna().to_numpy(dtype="float64"))
        out[c] = ({"n": int(v.size), "p50": nearest_rank(v, 0.5), "p90": nearest_rank(v, 0.9),
                   "p99": nearest_rank(v, 0.99), "max": float(v[-1])} if v.size else
                  {"n": 0, "p50": None, "p90": None, "p99": None, "max": None})
    return out


def _messages(fates: pd.DataFrame, devices: int, samples: int, received_total: int) -> dict[str, Any]:
    sent = int(fates["sent"].sum())
    lost = fates[fates["lost"]]
    by_place = {k: int((lost["lost_at"] == k).sum()) for k in LOST_AT}
    return {"expected": devices * samples, "sent": sent,
            "delivered": int((fates["sent"] & fates["received"]).sum()), "lost": int(len(lost)),
            "not_sent": max(devices * samples - sent, 0),
            "received_not_in_send_log": int((fates["received"] & ~fates["sent"]).sum()),
            "received_unique": received_total,
            "devices_with_loss": int(lost["device"].nunique()), "lost_at": by_place,
            "lost_accounted": sum(by_place.values()) == len(lost), "capture_coverage": _coverage(fates)}


def _coverage(fates: pd.DataFrame) -> dict[str, Any]:
    """How much of what was delivered the capture's legs show: where they miss delivered messages (a decode
    left incomplete), a lost message missing there may still have passed, and lost_at says less."""
    done = fates[fates["sent"] & fates["received"]]
    on_in, on_out = int(done["on_in"].sum()), int(done["on_out"].sum())
    reliable = on_in == len(done) and on_out == len(done)
    out: dict[str, Any] = {"delivered": int(len(done)), "delivered_on_publisher_leg": on_in,
                           "delivered_on_subscriber_leg": on_out, "lost_at_reliable": reliable}
    if not reliable:
        out["note"] = ("the capture lacks delivered messages on a leg (not all decoded): a lost message placed "
                       "before that leg may have passed it")
    return out


def _delay(pm: pd.DataFrame, available: bool) -> dict[str, Any]:
    if not available:
        return metrics.unavailable_stats("one-way delay is not available for this run (see delay_ms)")
    out = metrics.describe(pm["delay_ms"])
    out["histogram"] = histogram(pm["delay_ms"])
    return out


def _loader(summary: dict[str, Any]) -> dict[str, Any]:
    """The loader's own figures (logs/fleet/summary.json)."""
    keys = ("processes", "cpu_user_s", "cpu_sys_s", "cpu_us_per_message", "max_rss_kb", "wall_s", "messages_sent",
            "schedule_lag_us", "steady_lag_us", "interrupted", "keylog_ok")
    out: dict[str, Any] = {k: summary.get(k) for k in keys}
    user, sys_ = summary.get("cpu_user_s"), summary.get("cpu_sys_s")
    out["cpu_s"] = (user or 0) + (sys_ or 0) if user is not None or sys_ is not None else None
    return out


def fleet_block(pm: pd.DataFrame, send_log: pd.DataFrame | None, connections: pd.DataFrame,
                summary: dict[str, Any] | None, *, devices: int, samples: int,
                delay_available: bool = True, opens: pd.DataFrame | None = None,
                outages: Outages | None = None) -> dict[str, Any]:
    """metrics.json ``fleet`` (without its broker part: analysis/fleetbroker.py)."""
    summary = summary or {}
    fates = message_fates(pm, send_log)
    received_total = int(fates["received"].sum())
    n_connected = int(connected(connections).sum())
    return {
        "devices": devices, "samples_per_device": samples,
        "connected": n_connected if len(connections) else summary.get("connected"),
        "failed": _failures(connections, summary),
        "messages": _messages(fates, devices, samples, received_total),
        "one_way_delay_ms": _delay(pm, delay_available),
        "connection_setup_ms": _setup(connections),
        "schedule_lag_us": schedule_lag(send_log, connections, opens, outages),
        "loader": _loader(summary),
        "definitions": DEFINITIONS,
    }


def warnings(block: dict[str, Any]) -> list[str]:
    """What a reader of the fleet block must not miss: failed devices, messages lost or never sent, a loader
    that fell behind its schedule."""
    out: list[str] = []
    failed, msgs, lag = block["failed"], block["messages"], block["schedule_lag_us"]
    if failed["devices"]:
        causes = ", ".join(f"{k}: {v}" for k, v in failed["by_error"].items())
        out.append(f"{failed['devices']} of {block['devices']} fleet devices failed ({causes})")
    if msgs["not_sent"]:
        out.append(f"{msgs['not_sent']} of {msgs['expected']} fleet messages were never sent (no send log line)")
    if msgs["lost"]:
        where = ", ".join(f"{k}: {v}" for k, v in msgs["lost_at"].items() if v)
        out.append(f"{msgs['lost']} of {msgs['sent']} fleet messages lost, from {msgs['devices_with_loss']} "
                   f"devices ({where})")
    cover = msgs["capture_coverage"]
    if msgs["lost"] and not cover["lost_at_reliable"]:
        out.append(f"where the {msgs['lost']} lost fleet messages were lost is uncertain: of {cover['delivered']} "
                   f"delivered, the capture shows {cover['delivered_on_publisher_leg']} on the publisher->broker "
                   f"leg and {cover['delivered_on_subscriber_leg']} on the broker->subscriber leg")
    if lag.get("available") and not lag.get("loader_kept_schedule"):
        out.append(lag["verdict"])
    return out
