"""The broker's cost at scale, for a fleet: CPU per message and per handshake, memory per connected client,
and whether its CPU was the run's ceiling (metrics.json ``fleet.broker``).

Series: resources.json's, [epoch s, value] about one a second: the Mosquitto PROCESS's own (CPU ns from
schedstat, VmRSS bytes) where this host could read it, else its container's cgroup (CPU with the
healthcheck's execs in it; memory usage less the page cache). Phases, from the capture:
- connect phase: from the first device's SYN (else connections.csv's t_start_us, its start slot) until
  the last device's first PUBLISH reached the broker (all devices connected);
- steady phase: from then until the first device stopped (its last PUBLISH at the broker): every device
  connected and publishing, the full load (when the connect phase outlasts a device's run there is no
  such plateau, and the steady phase runs to the end). CPU per message: the stats windows wholly in it
  (analysis/brokercpu.py).
  CPU per handshake: the windows spanning the connect phase divided by the handshakes in them, with
  NOTHING subtracted (the devices already connected publish meanwhile, and the idle broker's CPU is in).
Memory per client: (memory at the first sample once all are connected - the last sample before the first
connected) / devices connected. The ceiling: Mosquitto does its work on one thread, so the broker is
the limit only when its CPU averaged >= 90 % of a core over the steady 1-s windows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis import brokercpu

CEILING_CORES = 0.9
WINDOW_S = 1.0
SYN, ACK = 0x02, 0x10
Series = Sequence[Sequence[float]]


@dataclass(frozen=True)
class Phases:
    first_connect_s: float | None
    all_connected_s: float | None
    handshakes_s: np.ndarray  # one per device connection: its SYN (or start slot)
    source: str  # where the handshake times come from
    first_done_s: float | None = None  # the first device's last PUBLISH at the broker

    @property
    def steady_until_s(self) -> float | None:
        """The end of the full-load plateau (None: no plateau, the steady phase runs to the end)."""
        if self.first_done_s is None or self.all_connected_s is None or self.first_done_s <= self.all_connected_s:
            return None
        return self.first_done_s

    def as_dict(self) -> dict[str, Any]:
        return {"first_connect_s": self.first_connect_s, "all_connected_s": self.all_connected_s,
                "steady_until_s": self.steady_until_s, "handshakes": int(self.handshakes_s.size),
                "handshake_times_from": self.source}


def phases(per_packet: pd.DataFrame, pm: pd.DataFrame, connections: pd.DataFrame) -> Phases:
    """The connect phase's handshakes and its end (every device's first PUBLISH at the broker)."""
    up = per_packet[per_packet["leg"] == "publisher->broker"] if "leg" in per_packet else per_packet.iloc[:0]
    syn = up[(up["tcp_flags"].to_numpy() & (SYN | ACK)) == SYN] if len(up) else up
    times = syn.groupby("stream")["time"].min().to_numpy(dtype=float) if len(syn) else np.empty(0)
    source = "capture (SYN of each publisher connection)"
    if not times.size:
        times = connections["t_start_us"].dropna().to_numpy(dtype=float) / 1e6
        source = "connections.csv t_start_us (each device's start slot)"
    seen = pm.loc[pm["broker_in_us"].notna(), ["device", "broker_in_us"]]
    by_device = seen.groupby("device")["broker_in_us"]
    firsts = by_device.min().to_numpy(dtype=float) / 1e6
    lasts = by_device.max().to_numpy(dtype=float) / 1e6
    end = float(firsts.max()) if firsts.size else (float(times.max()) if times.size else None)
    start = float(times.min()) if times.size else None
    return Phases(start, end, np.sort(times), source, float(lasts.min()) if lasts.size else None)


def between(series: Series, t0: float | None, t1: float | None) -> list[list[float]]:
    """The samples from the last one at or before ``t0`` to the first at or after ``t1`` (None: no bound)."""
    rows = [list(map(float, r)) for r in series]
    t = np.array([r[0] for r in rows], dtype=float)
    lo = int(np.searchsorted(t, t0, side="right")) - 1 if t0 is not None else 0
    hi = int(np.searchsorted(t, t1, side="left")) if t1 is not None else len(rows) - 1
    return rows[max(lo, 0):min(hi, len(rows) - 1) + 1]


def core_windows(series: Series, window_s: float = WINDOW_S) -> list[tuple[float, float, float]]:
    """(start, end, cores) over windows of about ``window_s``: consecutive samples joined until one lasts
    at least 95 % of it (the stats stream samples about once a second, not exactly)."""
    out: list[tuple[float, float, float]] = []
    if len(series) < 2:
        return out
    t0, c0 = float(series[0][0]), float(series[0][1])
    for t, c in ((float(r[0]), float(r[1])) for r in series[1:]):
        if t - t0 >= 0.95 * window_s:
            out.append((t0, t, (c - c0) / 1e9 / (t - t0)))
            t0, c0 = t, c
    return out


def cpu_limit(series: Series, steady_from_s: float | None, host_cpus: int | None, source: str,
              steady_until_s: float | None = None) -> dict[str, Any]:
    """Peak CPU over 1-s windows (cores), the steady windows' mean and peak, and the verdict."""
    wins = core_windows(series)
    steady = [w for w in wins if steady_from_s is not None and w[0] >= steady_from_s
              and (steady_until_s is None or w[1] <= steady_until_s)]
    cores = np.array([w[2] for w in steady])
    out: dict[str, Any] = {"source": source, "window_s": WINDOW_S, "host_cpus": host_cpus,
                           "peak_cores": round(max(w[2] for w in wins), 4) if wins else None,
                           "steady_windows": len(steady),
                           "steady_mean_cores": round(float(cores.mean()), 4) if cores.size else None,
                           "steady_peak_cores": round(float(cores.max()), 4) if cores.size else None}
    out["broker_ceiling"] = bool(cores.size and cores.mean() >= CEILING_CORES)
    out["verdict"] = ceiling_verdict(out)
    return out


def ceiling_verdict(limit: dict[str, Any]) -> str:
    """Only a broker at >= 90 % of a core over the steady windows is called the ceiling."""
    cpus = limit.get("host_cpus")
    shared = (f"on this machine the loader shares the {cpus} CPUs with the broker" if cpus else
              "on this machine the loader shares the CPUs with the broker")
    mean = limit.get("steady_mean_cores")
    if mean is None:
        return f"no steady-phase window of the broker's CPU: whether it was the limit is unknown; {shared}"
    if limit.get("broker_ceiling"):
        return (f"the broker's ceiling: its CPU averaged {mean:.2f} cores over the {limit['steady_windows']} steady "
                f"1-s windows (>= 90 % of a core; Mosquitto works on one thread); {shared}")
    return (f"not the broker's ceiling: its CPU averaged {mean:.2f} cores over the steady 1-s windows (peak "
            f"{limit['steady_peak_cores']:.2f}), below 90 % of a core; the limit, if any, was elsewhere "
            f"(the loader, the network, the subscriber); {shared}")


def memory_per_client(series: Series, first_connect_s: float | None, all_connected_s: float | None,
                      connected: int, source: str) -> dict[str, Any]:
    """(memory once all are connected - memory before the first connected) / connected, bytes."""
    out: dict[str, Any] = {"source": source, "connected": connected, "before_bytes": None, "after_bytes": None,
                           "bytes_per_client": None}
    t = np.array([float(r[0]) for r in series], dtype=float)
    v = np.array([float(r[1]) for r in series], dtype=float)
    if first_connect_s is None or all_connected_s is None or not t.size:
        out["reason"] = "no memory series, or no connect phase"
        return out
    before = np.flatnonzero(t <= first_connect_s)
    after = np.flatnonzero(t >= all_connected_s)
    if not before.size or not after.size:
        out["reason"] = ("the memory series starts after the first device connected" if not before.size else
                         "the memory series ends before every device was connected")
        return out
    out.update(before_bytes=int(v[before[-1]]), after_bytes=int(v[after[0]]), peak_bytes=int(v.max()))
    if connected > 0:
        out["bytes_per_client"] = round((v[after[0]] - v[before[-1]]) / connected, 1)
    return out


def _pick(series: Mapping[str, Series | None]) -> tuple[Series, str]:
    """The process's series where present, else the cgroup's."""
    for source in ("process", "cgroup"):
        samples = series.get(source)
        if samples:
            return samples, source
    return [], "none"


def broker_block(cpu: Mapping[str, Series | None], memory: Mapping[str, Series | None], ph: Phases,
                 arrivals_s: np.ndarray, connected: int, host_cpus: int | None) -> dict[str, Any]:
    """metrics.json ``fleet.broker``: per message (steady), per handshake (connect phase), memory per client,
    the CPU ceiling verdict."""
    cpu_series, cpu_source = _pick(cpu)
    mem_series, mem_source = _pick(memory)
    steady_from, until = ph.all_connected_s, ph.steady_until_s
    steady = [list(r) for r in cpu_series if steady_from is not None and float(r[0]) >= steady_from
              and (until is None or float(r[0]) <= until)]
    later = arrivals_s[(arrivals_s >= steady_from) & (arrivals_s <= (np.inf if until is None else until))] \
        if steady_from is not None else arrivals_s[:0]
    connect = between(cpu_series, ph.first_connect_s, ph.all_connected_s) if cpu_series else []
    per_handshake = brokercpu.per_event(connect, ph.handshakes_s, what="handshake")
    per_handshake["note"] = ("the connect phase's windows whole: nothing subtracted (the broker's idle CPU and "
                             "the messages of the devices already connected are in)")
    return {"cpu_source": cpu_source, "phases": ph.as_dict(),
            "per_message": brokercpu.per_event(steady, later, what="message"),
            "per_handshake": per_handshake,
            "memory_per_client": memory_per_client(mem_series, ph.first_connect_s, ph.all_connected_s, connected,
                                                   mem_source),
            "broker_cpu_limit": cpu_limit(cpu_series, steady_from, host_cpus, cpu_source, until)}
