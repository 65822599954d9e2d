"""A fleet's loader against its own schedule, and the one verdict on it: did the loader keep up, or are the
cell's figures the loader's as much as the broker's ("loader-limited")?

Steady phase: t_send_us - t_intended_us of each send (when the device sent against when its schedule wanted
it). One-way delay runs from the ACTUAL send time, so a loader falling behind does not show as delay: it shows
here. A device's first send waits for its connection (TCP, TLS, CONNACK), so the steady lag of a later send is
its lag less its device's first send's lag.

Connect phase: each device's connect lag, how late its first connection BEGAN against its start (its slot plus
its seeded offset, which is the t_intended_us of its seq 0). Where the run wrote a connections log
(logs/publisher_connections.csv, a run with a connection lifecycle) it is t_open_us of the device's connection 0
(the wall clock just before its TCP connect) - t_intended_us of seq 0. A persistent fleet writes none; there it is
read off the first send: t_send(0) - t_intended(0) - (tcp_connect_ms + handshake_ms + connack_ms), the first
send's wait less the set-up the device timed itself, i.e. the waking for its slot, building its transport, the
gaps between the steps and the first reading: all of it the loader's own time, none of it the network's or the
broker's.

Events on the cell's timeline (a broker restart, a link down: --events) keep the devices from sending until they
are connected and publishing again; a send or a connection start the schedule wanted in such an outage (from the
event's start until the last device published again, metrics.json ``events``) is late because of the event, not the
loader: it is left out of the rule and counted apart (``outage_excluded``).

The rule, one for both phases and every host: a phase of a host is late when more than 1 % of its items are more
than 10 ms late (steady: the sends after each device's first; connect: the devices' first connections). The cell
is loader-limited when any phase of any host is late. Hosts are told apart by the ``host`` column of the send
logs (or of connections.csv) when a fleet ran across several lab hosts; without it the fleet is one host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

LATE_MS = (1.0, 10.0)
LATE_US = 10_000.0  # a send, or a connection's start, more than 10 ms late is late
LOADER_LATE_SHARE = 0.01  # more than 1 % of a phase's items late on a host: the loader fell behind there
PHASES = ("connect", "steady")
ONE_HOST = ""  # the host of a fleet whose logs name none
DEFINITION = (
    "all: t_send_us - t_intended_us of every send; first_send: each device's first (it waits for the device's "
    "connection); steady: a later send's lag less its device's first send's lag (= t_send(seq) - t_send(first) - "
    "(seq - first) x interval); connect: how late each device's first connection began against its start "
    "(t_open_us of its connection 0 - t_intended_us of its seq 0 where the connections log has it, else its first "
    "send's lag less its own tcp_connect + handshake + connack); late shares: more than 1 ms / 10 ms late. The "
    "rule: a phase (connect, steady) of a host is late when more than 1 % of its items are more than 10 ms late; "
    "the cell is loader-limited when any phase of any host is late (its handshake times, and what follows from "
    "the load it offered, are then the loader's as much as the broker's); what the schedule wanted during an "
    "event's outage (its start until the last device published again) is left out (outage_excluded)")


def nearest_rank(sorted_values: np.ndarray, q: float) -> float:
    k = max(1, int(np.ceil(q * sorted_values.size - 1e-9)))
    return float(sorted_values[k - 1])


def lag_stats(lag_us: np.ndarray | pd.Series) -> dict[str, Any]:
    """Nearest-rank p50/p99 and max of a lag (us), and the shares of sends later than 1 ms and 10 ms."""
    v = np.sort(np.asarray(pd.Series(lag_us, dtype="float64").dropna(), dtype="float64"))
    out: dict[str, Any] = {"n": int(v.size), "p50": None, "p99": None, "max": None}
    out.update({f"share_late_{ms:g}ms": None for ms in LATE_MS})
    if not v.size:
        return out
    out.update(p50=nearest_rank(v, 0.50), p99=nearest_rank(v, 0.99), max=float(v[-1]))
    out.update({f"share_late_{ms:g}ms": float((v > ms * 1000).mean()) for ms in LATE_MS})
    return out


def _hosts(frame: pd.DataFrame) -> np.ndarray:
    if "host" in frame.columns:
        return frame["host"].fillna(ONE_HOST).astype("str").to_numpy()
    return np.full(len(frame), ONE_HOST, dtype=object)


def lags(send_log: pd.DataFrame) -> pd.DataFrame:
    """device, host, seq, lag (t_send - t_intended, us), first (the device's first send), steady (lag - the lag
    of the device's first send: how late a later send was against the device's own first, which already waited
    for its connection)."""
    frame = pd.DataFrame({"device": send_log["device"].astype("str").to_numpy(), "host": _hosts(send_log),
                          "seq": send_log["seq"].to_numpy(dtype=np.int64),
                          "lag": (send_log["t_send_us"] - send_log["t_intended_us"]).to_numpy(dtype="float64")})
    frame = frame.sort_values(["device", "seq"], kind="stable").reset_index(drop=True)
    frame["first"] = ~frame["device"].duplicated().to_numpy()
    frame["steady"] = frame["lag"] - frame.groupby("device", sort=False)["lag"].transform("first")
    return frame


def connect_lags(send_log: pd.DataFrame | None, connections: pd.DataFrame,
                 opens: pd.DataFrame | None = None) -> pd.DataFrame:
    """device, host, lag (us): how late each device's first connection began against its start; ``source`` says
    how it was read (t_open_us of the connections log, else the first send less the device's own set-up)."""
    columns = ["device", "host", "lag", "source"]
    if send_log is None or "t_intended_us" not in send_log or not len(send_log):
        return pd.DataFrame({c: [] for c in columns})
    first = lags(send_log)
    first = first[first["first"] & (first["seq"] == 0)][["device", "host", "lag"]]
    intended = send_log[send_log["seq"] == 0].assign(device=lambda f: f["device"].astype("str")) \
        .drop_duplicates("device").set_index("device")["t_intended_us"]
    conn = connections.assign(device=connections["device"].astype("str")).drop_duplicates("device") \
        .set_index("device")
    setup_ms = conn.reindex(first["device"])[["tcp_connect_ms", "handshake_ms", "connack_ms"]]
    setup_ms = setup_ms.fillna({"handshake_ms": 0.0})  # plain MQTT: no TLS handshake
    residual = first["lag"].to_numpy() - setup_ms.sum(axis=1, skipna=False).to_numpy(dtype="float64") * 1000
    out = pd.DataFrame({"device": first["device"].to_numpy(), "host": first["host"].to_numpy(), "lag": residual,
                        "source": "first send less its set-up"})
    if opens is not None and len(opens):
        zero = opens[opens["conn"] == 0].assign(device=lambda f: f["device"].astype("str")) \
            .drop_duplicates("device").set_index("device")["t_open_us"]
        began = zero.reindex(out["device"]).to_numpy(dtype="float64") - \
            intended.reindex(out["device"]).to_numpy(dtype="float64")
        have = ~np.isnan(began)
        out.loc[have, "lag"] = began[have]
        out.loc[have, "source"] = "t_open_us of connection 0"
    if "host" in conn.columns and (out["host"] == ONE_HOST).all():
        out["host"] = conn["host"].reindex(out["device"]).fillna(ONE_HOST).astype("str").to_numpy()
    return out[columns]


Outages = list[tuple[float, float]]  # (from, until) epoch seconds: the events' outages


def outages_of(events: dict[str, Any] | None) -> Outages:
    """Each event's outage from metrics.json ``events``: its start until the last device published again (until
    the end of the cell when a device never did)."""
    out: Outages = []
    for ev in (events or {}).get("events") or []:
        back = (ev.get("publishing_s") or {}).get("max")
        out.append((float(ev["start"]), float("inf") if back is None or ev.get("not_back") else ev["start"] + back))
    return out


def in_outage(t_us: pd.Series | np.ndarray, outages: Outages) -> np.ndarray:
    t = np.asarray(t_us, dtype="float64") / 1e6
    hit = np.zeros(t.size, dtype=bool)
    for start, until in outages:
        hit |= (t >= start) & (t <= until)
    return hit


def _judge(values: pd.Series | np.ndarray, excluded: int | None = None) -> dict[str, Any]:
    stats = lag_stats(values)
    if excluded is not None:
        stats["outage_excluded"] = excluded
    share = stats["share_late_10ms"]
    stats["late"] = bool(share is not None and share > LOADER_LATE_SHARE)
    return stats


def _per_host(frame: pd.DataFrame, connect: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Every host's two phases judged by the rule."""
    later = frame[~frame["first"]]
    hosts = sorted(set(frame["host"]) | set(connect["host"]))
    return {h: {"devices": int(frame.loc[frame["host"] == h, "device"].nunique()),
                "connect": _judge(connect.loc[connect["host"] == h, "lag"]),
                "steady": _judge(later.loc[later["host"] == h, "steady"])} for h in hosts}


def _where(host: str, several: bool) -> str:
    return f"host {host}: " if several or host != ONE_HOST else ""


def _late_words(late: list[dict[str, Any]], several: bool) -> str:
    words = []
    for item in late:
        where, share, p99 = _where(item["host"], several), item["share"] * 100, item["p99_us"] / 1000
        if item["phase"] == "connect":
            words.append(f"{where}in the connect phase {share:.1f} % of the devices' connections began more than "
                         f"10 ms late (p99 {p99:.1f} ms): their handshake times are the loader's as much as the "
                         "broker's")
        else:
            words.append(f"{where}{share:.1f} % of the sends after each device's first were more than 10 ms late "
                         f"against it (p99 {p99:.1f} ms): the load offered was lower than asked (this lag is not in "
                         "the one-way delay, which runs from the actual send)")
    return "; ".join(words)


def loader_verdict(out: dict[str, Any], hosts: dict[str, dict[str, Any]]) -> str:
    """The verdict's words from the judged phases (``out``: the overall figures, ``hosts``: per host)."""
    several = len(hosts) > 1
    if out["late"]:
        return f"the loader FELL BEHIND (loader-limited): {_late_words(out['late'], several)}"
    steady, connect = out["steady"], out["connect"]
    if steady["p99"] is None and connect["p99"] is None:
        return "no device sent more than once and no connection's start is known: the loader's schedule cannot be " \
               "judged"
    parts = []
    if steady["p99"] is not None:
        parts.append(f"sends after each device's first were p99 {steady['p99'] / 1000:.3f} ms late against it "
                     f"({steady['share_late_10ms'] * 100:.2f} % over 10 ms)")
    if connect["p99"] is not None:
        parts.append(f"connections began p99 {connect['p99'] / 1000:.3f} ms after their start "
                     f"({connect['share_late_10ms'] * 100:.2f} % over 10 ms)")
    return f"the loader kept its schedule{' on every host' if several else ''}: " + "; ".join(parts)


def schedule_lag(send_log: pd.DataFrame | None, connections: pd.DataFrame | None = None,
                 opens: pd.DataFrame | None = None, outages: Outages | None = None) -> dict[str, Any]:
    """metrics.json ``fleet.schedule_lag_us``: every send against its schedule, each device's first send, the later
    sends against the device's first (``steady``), each device's connection start (``connect``), per host when
    the logs name hosts, and the one verdict on the loader over both phases and every host (what the schedule
    wanted in an event's ``outages`` left out of it)."""
    if send_log is None or "t_intended_us" not in send_log or not len(send_log):
        return {"available": False, "reason": "no fleet send log with t_intended_us", "loader_limited": None}
    frame = lags(send_log)
    first = frame["first"].to_numpy()
    connect = connect_lags(send_log, connections if connections is not None else pd.DataFrame(
        {c: [] for c in ("device", "tcp_connect_ms", "handshake_ms", "connack_ms")}), opens)
    out: dict[str, Any] = {"available": True, "all": lag_stats(frame["lag"]),
                           "first_send": lag_stats(frame["lag"][first])}
    excluded: tuple[int | None, int | None] = (None, None)
    if outages:
        intended = send_log[["device", "seq", "t_intended_us"]].astype({"device": "str"})
        frame = frame.merge(intended, on=["device", "seq"], how="left", sort=False)
        starts = intended[intended["seq"] == 0].drop_duplicates("device").set_index("device")["t_intended_us"]
        keep = ~in_outage(frame["t_intended_us"], outages) | frame["first"].to_numpy()
        keep_connect = ~in_outage(starts.reindex(connect["device"]).to_numpy(dtype="float64"), outages)
        excluded = int((~keep).sum()), int((~keep_connect).sum())
        frame, connect = frame[keep], connect[keep_connect]
    later = ~frame["first"].to_numpy()
    out["steady"], out["connect"] = _judge(frame["steady"][later], excluded[0]), _judge(connect["lag"], excluded[1])
    out["connect"]["from"] = sorted(set(connect["source"].dropna()))
    hosts = _per_host(frame, connect)
    if set(hosts) != {ONE_HOST}:
        out["hosts"] = hosts
    out["late"] = [{"host": h, "phase": p, "share": v[p]["share_late_10ms"], "p99_us": v[p]["p99"], "n": v[p]["n"]}
                   for h, v in hosts.items() for p in PHASES if v[p]["late"]]
    out["loader_limited"] = bool(out["late"])
    out["loader_kept_schedule"] = not out["loader_limited"]
    out["verdict"] = loader_verdict(out, hosts)
    return out


def device_lags(send_log: pd.DataFrame) -> pd.DataFrame:
    """Per device: nearest-rank p50 / p99 and max of its sends' lag, and p99 of its steady lag (us)."""
    frame = lags(send_log)
    out = pd.DataFrame(index=pd.Index(sorted(frame["device"].unique()), name="device"))
    for column, qs in (("lag", (0.50, 0.99, 1.0)), ("steady", (0.99,))):
        part = frame[~frame["first"]] if column == "steady" else frame
        part = part.sort_values(["device", column], kind="stable")
        sizes = part.groupby("device", sort=True).size()
        starts = np.concatenate([[0], np.cumsum(sizes.to_numpy())[:-1]]).astype(np.int64)
        values = part[column].to_numpy()
        for q in qs:
            k = np.maximum(1, np.ceil(q * sizes.to_numpy() - 1e-9).astype(np.int64))
            name = f"{column}_{'max' if q == 1.0 else f'p{round(q * 100)}'}_us"
            out[name] = pd.Series(values[starts + k - 1] if len(sizes) else [], index=sizes.index, dtype="float64")
    return out.reset_index()


def limited(block: dict[str, Any]) -> dict[str, Any]:
    """metrics.json ``fleet.limited`` (and cell.json ``limited``): the loader's verdict beside the broker's 90 %-of-
    a-core rule. ``loader`` / ``broker``: true, false, or None when it could not be judged (no send log; no steady
    window of the broker's CPU); ``labels``: "loader-limited", "broker-limited"; ``late``: which host and phase."""
    lag = block.get("schedule_lag_us") or {}
    ceiling = (block.get("broker") or {}).get("broker_cpu_limit") or {}
    loader = lag.get("loader_limited", None if "loader_kept_schedule" not in lag else  # a block from before the
                     not lag["loader_kept_schedule"]) if lag.get("available") else None  # connect phase: steady only
    broker = bool(ceiling.get("broker_ceiling")) if ceiling.get("steady_mean_cores") is not None else None
    return {"loader": loader, "broker": broker,
            "labels": [name for name, value in (("loader-limited", loader), ("broker-limited", broker)) if value],
            "late": lag.get("late") or [], "verdict": lag.get("verdict")}


def limited_label(limits: dict[str, Any] | None) -> str | None:
    """summary.csv ``limited``: "loader-limited", "broker-limited", both, "none"; None (n/a) when neither rule
    could judge the cell (a single device's cell, or a fleet without its logs)."""
    if not limits or (limits.get("loader") is None and limits.get("broker") is None):
        return None
    return "; ".join(limits.get("labels") or []) or "none"
