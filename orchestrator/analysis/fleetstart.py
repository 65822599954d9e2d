"""A fleet over several lab hosts: each host's clock and its start, from the capture (docs/multi-host.md).

Per host (metrics.json ``fleet.hosts.<host>``): its clock against the broker host's (offset before and after, drift,
bound, its time discipline: a slew is a warning) and whether that bound allows one-way delay for ITS messages
(analysis/clock.py's rule on the host's uplink median; otherwise withheld for that host, with the reason).
``clock.send_times``: whether the host's send times, mapped to the broker host's clock (analysis/clock.py to_lab),
lie within the bound as far as the capture can tell: a message is captured after it was sent, so a mapped send time
within its bound of the truth is at most the bound after its capture; ``within_bound`` holds when at least 99 % of
the host's messages are (the 1st percentile of its uplink, capture less mapped send, is at least -bound). A host
whose mapped send times fall later is named in a warning: its estimate does not hold for its messages.

The start (``fleet.start``): each host's first SYN on the broker-side capture (from its address towards the broker)
against when its first device was due to connect on the common timeline: the start on the broker host's clock
(logs/fleet_start.json) plus the earliest first-send moment of the host's devices after its own start, on its own
clock (a device connects at its slot i / connect_rate plus its seeded offset within the first interval: the seq-0
``t_intended_us`` of its send log as the host wrote it, logs/hosts/<host>/fleet/, less the host's --start-at-us: a
difference on one clock, whatever that clock's offset). The spread is the largest start offset less the smallest,
reported beside the sum of the hosts' bounds and the tolerance START_TOLERANCE_US.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis.clock import one_way_delay_available

SYN, SYN_ACK_MASK = 0x02, 0x12
# What the spread may exceed the hosts' bounds by: a device's first SYN follows its slot by its thread's wake-up
# and connect() (a loaded 2-core host: up to a few ms), on every host alike but not equally: 5 ms
START_TOLERANCE_US = 5000.0
SEND_TIMES_SHARE = 0.99  # of a host's messages whose mapped send time must be within the bound (the 1st percentile)


def first_syns(packets: pd.DataFrame, port: int | None = None) -> dict[str, float]:
    """source address -> its first SYN's capture time (epoch microseconds) towards the broker."""
    need = {"tcp_flags", "ip_src", "time"}
    if not need <= set(packets.columns) or not len(packets):
        return {}
    syn = packets[(packets["tcp_flags"].astype("int64") & SYN_ACK_MASK) == SYN]
    if "leg" in syn.columns:
        syn = syn[syn["leg"] == "publisher->broker"]
    if port is not None and "dst_port" in syn.columns:
        syn = syn[syn["dst_port"] == port]
    firsts = syn.groupby(syn["ip_src"].astype(str), observed=True)["time"].min()
    return {ip: float(t) * 1e6 for ip, t in firsts.items() if ip}


def first_due(folder: Path) -> int | None:
    """The earliest seq-0 ``t_intended_us`` of the send logs in ``folder`` (a host's own fleet logs)."""
    found = []
    for path in folder.glob("*.csv") if folder.is_dir() else []:
        with path.open() as f:
            for row in csv.DictReader(f):
                if row.get("seq") == "0" and (row.get("t_intended_us") or "").lstrip("-").isdigit():
                    found.append(int(row["t_intended_us"]))
                break
    return min(found) if found else None


def send_times_block(bound_us: float, uplink_p01_ms: float | None) -> dict[str, Any]:
    """Whether a host's mapped send times lie within its bound as far as the capture tells (module docstring)."""
    if uplink_p01_ms is None:
        return {"within_bound": None, "reason": "no uplink figure for this host's messages"}
    return {"within_bound": uplink_p01_ms * 1000 >= -bound_us, "uplink_p01_ms": uplink_p01_ms,
            "share": SEND_TIMES_SHARE,
            "definition": "at least 99 % of the host's messages captured no earlier than their mapped send time less "
                          "the host's clock bound (the 1st percentile of capture less mapped send >= -bound)"}


def host_clock_block(record: dict[str, Any], uplink_median_ms: float | None,
                     uplink_p01_ms: float | None = None) -> dict[str, Any]:
    """A host's clock figures, its one-way delay verdict and whether its mapped send times hold (send_times_block)."""
    disc = record.get("discipline") or {}
    out: dict[str, Any] = {"available": bool(record.get("available")), "slewing": bool(disc.get("slewing")),
                           "daemons": disc.get("daemons") or []}
    if not record.get("available"):
        reason = f"no clock estimate for this host ({record.get('reason')}): one-way delay is not available"
        return {**out, "reason": record.get("reason"), "one_way_delay": {"available": False, "reason": reason}}
    out.update(offset_us=record["pre"]["offset_us"], offset_post_us=record["post"]["offset_us"],
               drift_ppm=record["drift_ppm"], bound_us=record["bound_us"],
               send_times=send_times_block(float(record["bound_us"]), uplink_p01_ms))
    if uplink_median_ms is None:
        out["one_way_delay"] = {"available": False, "reason": "no uplink figure for this host's messages"}
    else:
        verdict = one_way_delay_available(float(record["bound_us"]), uplink_median_ms * 1000)
        out["one_way_delay"] = {"available": verdict.available, "reason": verdict.reason}
    return out


def start_block(start: dict[str, Any], syns: dict[str, float], bounds: dict[str, float | None],
                due: dict[str, int | None] | None = None) -> dict[str, Any]:
    """Each host's start offset (its first SYN less when its first device was due) and the spread; ``due``: host ->
    its earliest first send on its own clock (first_due), else its first device's slot."""
    rate = float(start["connect_rate"])
    hosts: dict[str, Any] = {}
    for host, first in (start.get("first_device") or {}).items():
        address = (start.get("addresses") or {}).get(host)
        seen = syns.get(str(address)) if address else None
        own = (due or {}).get(host)
        at = ((start.get("hosts") or {}).get(host) or {}).get("start_at_us")
        if own is not None and at is not None:
            slot: float | None = start["broker_us"] + (own - at)
        else:
            slot = start["broker_us"] + first * 1e6 / rate if first is not None else None
        hosts[host] = {"address": address, "first_device": first, "due_us": slot, "first_syn_us": seen,
                       "start_offset_us": round(seen - slot, 1) if seen is not None and slot is not None else None}
    offsets = [h["start_offset_us"] for h in hosts.values() if h["start_offset_us"] is not None]
    known = [b for b in bounds.values() if b is not None]
    bound_sum = sum(known) if len(known) == len(bounds) else None
    spread = max(offsets) - min(offsets) if len(offsets) == len(hosts) and offsets else None
    out = {"broker_us": start["broker_us"], "hosts": hosts, "spread_us": spread, "hosts_bound_sum_us": bound_sum,
           "tolerance_us": START_TOLERANCE_US,
           "definition": "start offset: a host's first SYN on the capture less when its first device was due "
                         "(the start on the broker host's clock plus the host's earliest first send after its own "
                         "start, on its own clock); spread: the largest offset less the smallest"}
    out["within"] = (spread <= bound_sum + START_TOLERANCE_US) if spread is not None and bound_sum is not None \
        else None
    return out


def start_warnings(block: dict[str, Any]) -> list[str]:
    out = []
    for host, figures in (block.get("hosts") or {}).items():
        clock = figures.get("clock") or {}
        if clock.get("slewing"):
            out.append(f"{host}: its clock was slewed during the cell (adjtimex): the drift is not linear and "
                       "its bound may not hold")
        if (clock.get("one_way_delay") or {}).get("available") is False:
            out.append(f"{host}: one-way delay withheld: {clock['one_way_delay']['reason']}")
        if (clock.get("send_times") or {}).get("within_bound") is False:
            out.append(f"{host}: more than 1 % of its send times, mapped to the broker host's clock, fall after their "
                       f"capture by more than its clock bound ({clock['bound_us']:.0f} us; uplink 1st percentile "
                       f"{clock['send_times']['uplink_p01_ms']:.3f} ms): its clock estimate does not hold for its "
                       "messages (a clock stepped or slewed during the cell?)")
    start = block.get("start") or {}
    if start.get("within") is False:
        late = max(start["hosts"].items(), key=lambda kv: kv[1]["start_offset_us"] or 0)[0]
        out.append(f"the hosts' start spread {start['spread_us'] / 1000:.3f} ms exceeds their bounds' sum "
                   f"{start['hosts_bound_sum_us'] / 1000:.3f} ms + {START_TOLERANCE_US / 1000:.0f} ms; "
                   f"latest to start: {late}")
    missing = [h for h, v in (start.get("hosts") or {}).items() if v.get("first_syn_us") is None]
    if missing:
        out.append(f"no SYN on the capture from {', '.join(missing)}: its start is not measured")
    return out


def add_fleet_hosts(metrics: dict[str, Any], packets: pd.DataFrame, host_clock: dict[str, Any],
                    start: dict[str, Any] | None, due: dict[str, int | None] | None = None) -> list[str]:
    """metrics.json ``fleet.hosts`` completed with each host's clock, ``fleet.start``; the warnings."""
    block = metrics.get("fleet")
    if not isinstance(block, dict) or not block.get("hosts"):
        return []
    records = host_clock.get("hosts") or {}
    for host, figures in block["hosts"].items():
        figures["clock"] = host_clock_block(records.get(host) or {"available": False, "reason": "no record"},
                                            figures.get("uplink_median_ms"), figures.get("uplink_p01_ms"))
    if start:
        bounds = {h: (block["hosts"].get(h, {}).get("clock") or {}).get("bound_us") for h in start["first_device"]}
        block["start"] = start_block(start, first_syns(packets), bounds, due)
        for host, figures in block["start"]["hosts"].items():
            block["hosts"].setdefault(host, {})["start_offset_us"] = figures["start_offset_us"]
    found = start_warnings(block)
    metrics.setdefault("warnings", []).extend(found)
    return found
