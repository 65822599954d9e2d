"""A fleet that ran over several lab hosts (docs/multi-host.md): which host ran each device, and the figures per host.

logs/fleet_hosts.csv (``device,host``, written by lab/merge.py from what each host's archive held) gives the
``host`` column (the inventory host name) of the per-message table, the send log, the per-device connection table
and devices.csv; metrics.json ``fleet.hosts`` gets per host its devices, messages expected, sent, delivered and
lost, and the devices with loss, its uplink's median and 1st percentile (lowest_but_one_percent;
runanalysis/labanalysis.py adds each host's clock and start offset; analysis/fleetstart.py judges the host's mapped
send times by that percentile).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis.fleet import message_fates

HOST = "host"


def read_hosts(path: Path) -> dict[str, str]:
    """device -> host; empty when the run has no such file (a fleet on one machine)."""
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
    except OSError:
        return {}
    return {r["device"]: r["host"] for r in rows if r.get("device") and r.get("host")}


def with_hosts(frame: pd.DataFrame | None, hosts: dict[str, str]) -> pd.DataFrame | None:
    """``frame`` with a ``host`` column from its ``device`` column (empty for a device no host ran)."""
    if frame is None or "device" not in frame.columns or not hosts:
        return frame
    return frame.assign(**{HOST: frame["device"].astype(str).map(hosts).fillna("")})


def hosts_block(pm: pd.DataFrame, send_log: pd.DataFrame | None, hosts: dict[str, str],
                samples: int) -> dict[str, dict[str, Any]]:
    """Per host: devices, messages expected, sent, delivered, lost, devices with loss, its uplink's median and
    1st percentile."""
    fates = message_fates(pm, send_log)
    fates[HOST] = fates["device"].map(hosts).fillna("")
    out: dict[str, dict[str, Any]] = {}
    for host in sorted(set(hosts.values())):
        devices = sum(1 for h in hosts.values() if h == host)
        mine = fates[fates[HOST] == host]
        lost = mine[mine["lost"]]
        out[host] = {"devices": devices, "messages": {
            "expected": devices * samples, "sent": int(mine["sent"].sum()),
            "delivered": int((mine["sent"] & mine["received"]).sum()), "lost": int(len(lost)),
            "devices_with_loss": int(lost["device"].nunique())}}
        if "uplink_ms" in pm.columns:  # its one-way delay verdict (runanalysis/labanalysis.py)
            uplink = pd.to_numeric(pm.loc[pm["device"].astype(str).map(hosts) == host, "uplink_ms"],
                                   errors="coerce").dropna()
            out[host]["uplink_median_ms"] = float(uplink.median()) if len(uplink) else None
            out[host]["uplink_p01_ms"] = lowest_but_one_percent(uplink)
    return out


def lowest_but_one_percent(values: pd.Series) -> float | None:
    """The smallest value once the lowest 1 % (rounded down) are set aside: at least 99 % of the values are at least
    this (an exact count, not an interpolated percentile)."""
    if not len(values):
        return None
    ordered = values.sort_values().to_numpy(dtype=float)
    return float(ordered[int(len(ordered) * 0.01)])
