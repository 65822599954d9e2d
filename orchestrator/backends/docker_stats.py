"""Broker CPU seconds and peak memory over a run, from the engine's stats stream (docker SDK, reaching the
engine the docker CLI reaches: backends/docker.py resolves DOCKER_HOST and `docker context`).

The stream's CPU is the container's cgroup: it also holds every `docker exec` into the container, i.e.
the broker's healthcheck (images/broker/healthcheck.sh, every 250 ms: measured here at about 100 ms of
CPU per second, more than Mosquitto's own work at 50 messages/s). So each stats sample also reads the
broker PROCESS's own CPU time where this host can see it (/proc/<pid>/task/*/schedstat of the
container's main process, in ns: Linux with a local engine; not Docker Desktop's VM).

Memory likewise, as two series (a fleet's memory per connected client comes from them): the cgroup's
usage less its page cache (``inactive_file`` on cgroup v2, ``total_inactive_file`` on v1, else ``cache``:
what `docker stats` shows) and the process's own VmRSS (/proc/<pid>/status), where this host can read it.

The process's figures are its whole tree's (process_tree): Mosquitto is one process, a RabbitMQ node several (its
start script, the Erlang VM, the VM's helpers; the entrypoint's only child is not the node once epmd, daemonised,
is its second child, so the tree is then the entrypoint's, which holds them all, the health check's execs never).
The broker process can be replaced while the sampler runs (an --events broker-restart: the image's entrypoint
starts a new Mosquitto as its child): each sample looks up the entrypoint's child again and follows the new one;
every process seen keeps its last CPU reading, so the process series stays a running total
(``broker_process_restarts`` counts the switches; a process's CPU after its last sample, at most a second's
worth, is not in it)."""

from __future__ import annotations

import datetime as dt
import glob
import os
import threading
import time
from typing import Any

from orchestrator.backends.docker_endpoint import sdk_client


class StatsSampler:
    """Follow one container's stats stream in a thread; CPU at the end, memory at its peak."""

    def __init__(self, container_name: str, *, from_start: bool = False) -> None:
        """``from_start``: the container ran before this sampler (a sweep block's kept-up broker): its cgroup's CPU
        is counted from the first sample, not from the container's start."""
        self.container_name = container_name
        self.from_start = from_start
        self.cpu_start_ns: int | None = None
        self.cpu_last_ns: int | None = None
        self.peak_mem: int | None = None
        self.samples = 0
        self.series: list[tuple[float, int]] = []  # (the engine's read time, epoch s; CPU ns since start)
        self.process_series: list[tuple[float, int]] = []  # (this host's time, epoch s; the process's CPU ns)
        self.mem_series: list[tuple[float, int]] = []  # (the engine's read time; cgroup bytes less page cache)
        self.rss_series: list[tuple[float, int]] = []  # (this host's time; the process's VmRSS bytes)
        self.pid: int | None = None
        self.entrypoint: int | None = None  # the container's first process, whose child the broker is
        self.process_restarts = 0
        self._cpu_by_pid: dict[int, int] = {}  # every process of the tree seen so far: its last CPU ns
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StatsSampler:
        self._thread = threading.Thread(target=self._follow, name=f"stats-{self.container_name}", daemon=True)
        self._thread.start()
        return self

    def _follow(self) -> None:
        try:
            container = sdk_client(timeout=30).containers.get(self.container_name)
            self.entrypoint = int((container.attrs.get("State") or {}).get("Pid") or 0) or None
            self.pid = main_process(self.entrypoint)
            for s in container.stats(stream=True, decode=True):
                self._take(s)
                if self._stop.is_set():
                    break
        except Exception as exc:  # noqa: BLE001 - stats are best effort; recorded, never fatal
            self.error = f"{type(exc).__name__}: {exc}"

    def _take(self, s: dict[str, Any]) -> None:
        cpu = (s.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        mem_stats = s.get("memory_stats") or {}
        mem = mem_stats.get("max_usage") or mem_stats.get("usage")
        if cpu:
            if self.cpu_start_ns is None:
                self.cpu_start_ns = int(cpu)
            self.cpu_last_ns = int(cpu)
        read = _epoch(s.get("read"))
        if cpu and read is not None:
            self.series.append((read, int(cpu)))
        used = cgroup_memory_bytes(mem_stats)
        if used is not None and read is not None:
            self.mem_series.append((read, used))
        own = self._process_cpu_ns()
        now = time.time()
        if own is not None:
            self.process_series.append((now, own))
        rss = tree_rss_bytes(self.pid)
        if rss is not None:
            self.rss_series.append((now, rss))
        if mem:
            self.peak_mem = max(self.peak_mem or 0, int(mem))
        self.samples += 1

    def _process_cpu_ns(self) -> int | None:
        """The broker's CPU time over its process tree, running on across a replaced process (the entrypoint's new
        child): each process seen keeps its last reading, so one that ended still counts."""
        now = main_process(self.entrypoint) if self.entrypoint else None
        if now and now not in (self.pid, self.entrypoint):
            self.pid = now
            self.process_restarts += 1
        readings = {p: ns for p in process_tree(self.pid) if (ns := process_cpu_ns(p)) is not None}
        if not readings:
            return None
        self._cpu_by_pid.update(readings)
        return sum(self._cpu_by_pid.values())

    def stop(self) -> dict[str, Any]:
        """The figures so far. The stream sends a sample a second; rather than wait up to that second for the next
        one, the process's CPU and RSS are read once more now (the cgroup's figures are the last sample's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.05)
        own = self._process_cpu_ns()
        rss, now = tree_rss_bytes(self.pid), time.time()
        if own is not None and self.process_series:
            self.process_series.append((now, own))
        if rss is not None and self.rss_series:
            self.rss_series.append((now, rss))
        cgroup_s = None
        if self.cpu_last_ns is not None:
            cgroup_s = self.cpu_last_ns / 1e9  # total since the broker started: the whole run
            if self.from_start and self.cpu_start_ns is not None:
                cgroup_s = (self.cpu_last_ns - self.cpu_start_ns) / 1e9
        process_s = self.process_series[-1][1] / 1e9 if self.process_series else None
        return {"broker_cpu_s": process_s if process_s is not None else cgroup_s,
                "broker_cpu_source": "process" if process_s is not None else "cgroup" if cgroup_s is not None else None,
                "broker_cgroup_cpu_s": cgroup_s,
                "broker_peak_mem_bytes": self.peak_mem, "stats_samples": self.samples,
                "broker_process_restarts": self.process_restarts,
                "stats_error": self.error, "broker_cpu_series": [[round(t, 6), c] for t, c in self.series],
                "broker_process_cpu_series": [[round(t, 6), c] for t, c in self.process_series],
                "broker_mem_series": [[round(t, 6), b] for t, b in self.mem_series],
                "broker_process_rss_series": [[round(t, 6), b] for t, b in self.rss_series],
                "host_cpus": os.cpu_count()}


def cgroup_memory_bytes(mem_stats: dict[str, Any]) -> int | None:
    """The cgroup's memory usage less its page cache, as `docker stats` shows it (None without a usage)."""
    usage = mem_stats.get("usage")
    if not isinstance(usage, int | float) or usage <= 0:
        return None
    stats = mem_stats.get("stats") or {}
    for key in ("inactive_file", "total_inactive_file", "cache"):
        cache = stats.get(key)
        if isinstance(cache, int | float) and 0 <= cache < usage:
            return int(usage - cache)
    return int(usage)


def process_rss_bytes(pid: int | None) -> int | None:
    """VmRSS of ``pid`` in bytes (/proc/<pid>/status, in kB there), or None where it cannot be read."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_tree(pid: int | None) -> list[int]:
    """``pid`` and every process below it (/proc/<pid>/task/*/children, recursively): the broker's whole tree, e.g. a
    RabbitMQ node's start script, its Erlang VM (beam.smp) and the VM's helpers; Mosquitto alone has none. A
    `docker exec` (the health check) is not below it. Empty when ``pid`` cannot be read."""
    if not pid:
        return []
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 1000:
        p = todo.pop()
        tasks = glob.glob(f"/proc/{p}/task/*/children")
        if not tasks and p != pid:
            continue
        found.append(p)
        for path in tasks:
            try:
                todo += [int(c) for c in open(path, encoding="ascii").read().split()]
            except (OSError, ValueError):
                continue
    return found


def tree_rss_bytes(pid: int | None) -> int | None:
    """VmRSS of ``pid``'s process tree (process_tree), summed; None where ``pid``'s cannot be read."""
    sizes = [process_rss_bytes(p) for p in process_tree(pid)]
    return sum(s for s in sizes if s is not None) if sizes and sizes[0] is not None else None


def main_process(pid: int | None) -> int | None:
    """The process a container runs for: its first process, or that one's only child when the first is a supervisor
    (the broker image's entrypoint runs Mosquitto as its child, so a new process can replace it)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            children = fh.read().split()
    except OSError:
        return pid
    return int(children[0]) if len(children) == 1 else pid


def process_cpu_ns(pid: int | None) -> int | None:
    """CPU time of every thread of ``pid`` (schedstat's first field, ns), or None where it cannot be read."""
    if not pid:
        return None
    total, seen = 0, False
    for stat in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(stat, encoding="ascii").read().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            continue
    return total if seen else None


def _epoch(stamp: object) -> float | None:
    """The stats record's ``read`` time (RFC 3339 with nanoseconds) as epoch seconds."""
    if not isinstance(stamp, str) or not stamp or stamp.startswith("0001-"):
        return None
    head, _, frac = stamp.rstrip("Z").partition(".")
    digits = "".join(ch for ch in frac if ch.isdigit())
    try:
        base = dt.datetime.fromisoformat(head).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None
    return base + (int(digits[:9].ljust(9, "0")) / 1e9 if digits else 0.0)
