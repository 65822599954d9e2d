"""Several publisher hosts' records merged into the one run folder the analysis reads (docs/multi-host.md).

Each publisher host's logs (already mapped to the broker host's clock, lab/collect.py) land in logs/ as on one
host: a fleet's per-device send logs (logs/fleet/<device>.csv: every device ran on exactly one host, so they never
collide) side by side; the per-connection tables (logs/fleet/connections.csv, logs/publisher_connections.csv) are
concatenated with a ``host`` column (the inventory host name) appended; the loader's summary (logs/fleet/
summary.json) is summed over the hosts, each host's own kept under ``hosts``. logs/fleet_hosts.csv names each
device's host (``device,host``), from the send logs and connection rows each host's archive held: what ran where,
not what was dealt (orchestrator/model/shares.py deals it).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

from orchestrator.analysis.logs import DEVICE_FILE, FLEET_NOT_SEND_LOGS
from orchestrator.results.atomic import write_json_atomic

HOST_COLUMN = "host"  # the inventory host name (analysis/fleet.py's per-host verdict keys by it)
TABLES = ("fleet/connections.csv", "publisher_connections.csv")
SUMMARY = "fleet/summary.json"
FLEET_HOSTS = "fleet_hosts.csv"  # in logs/
SUMMED = ("devices", "connected", "failed", "messages", "messages_expected", "cpu_user_s", "cpu_sys_s",
          "processes", "log_rows")


def host_rows(text: str, host: str) -> list[list[str]]:
    """A CSV table's rows with the ``host`` column appended (the header first)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if not rows:
        return []
    return [[*rows[0], HOST_COLUMN], *([*r, host] for r in rows[1:])]


def merge_tables(parts: list[tuple[str, str]]) -> str:
    """(host, table text) -> one table with a ``host`` column; the header of the first host's."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header: list[str] | None = None
    for host, text in parts:
        rows = host_rows(text, host)
        if not rows:
            continue
        if header is None:
            header = rows[0]
            writer.writerow(header)
        writer.writerows(rows[1:])
    return out.getvalue()


def merge_summaries(parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The loader's summaries of every host as one: counts and CPU summed, the peak RSS and wall time the
    largest, the errors listed, the lag percentiles the worst host's (percentiles do not add up: each host's are
    under ``hosts``), the CPU the devices' own times ran on each host's where the hosts' differ."""
    first = next(iter(parts.values()))
    merged: dict[str, Any] = dict(first)
    for key in SUMMED:
        counts = [p.get(key) for p in parts.values()]
        if all(isinstance(v, int | float) for v in counts):
            merged[key] = sum(counts)  # type: ignore[arg-type]
    for key in ("max_rss_kb", "wall_s"):
        peaks = [float(p[key]) for p in parts.values() if isinstance(p.get(key), int | float)]
        merged[key] = max(peaks) if peaks else None
    merged["interrupted"] = any(bool(p.get("interrupted")) for p in parts.values())
    merged["keylog_ok"] = all(p.get("keylog_ok", True) is not False for p in parts.values())
    errors = [e for p in parts.values() for e in (p.get("errors") or [])]
    if errors or "errors" in merged:
        merged["errors"] = errors
    for key in ("schedule_lag_us", "steady_lag_us"):
        lags = [p[key] for p in parts.values() if isinstance(p.get(key), dict)]
        if lags:
            merged[key] = max(lags, key=lambda lag: lag.get("p99") or 0)
    cpu = (merged.get("cpu_user_s") or 0) + (merged.get("cpu_sys_s") or 0)
    messages = merged.get("messages") or sum(int(p.get("log_rows") or 0) for p in parts.values())
    merged["cpu_us_per_message"] = cpu * 1e6 / messages if messages else None
    models = {host: str(p["cpu_model"]) for host, p in parts.items() if p.get("cpu_model")}
    if len(set(models.values())) > 1:  # the devices' own times ran on more than one kind of CPU: name each host's
        merged["cpu_model"] = "; ".join(f"{host}: {model}" for host, model in sorted(models.items()))
    merged["hosts"] = parts
    return merged


def _device_rows(text: str) -> list[str]:
    return [r[0] for r in list(csv.reader(io.StringIO(text)))[1:] if r]


def merge_logs(mapped: dict[str, Path], dest: Path) -> dict[str, str]:
    """Each host's logs/ (``mapped``: host -> its folder, times on the broker host's clock) into ``dest`` (logs/);
    device -> host (also written to logs/fleet_hosts.csv when a fleet ran)."""
    tables: dict[str, list[tuple[str, str]]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    devices: dict[str, str] = {}
    for host, folder in mapped.items():
        for src in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = src.relative_to(folder).as_posix()
            if rel in TABLES:
                text = src.read_text()
                tables.setdefault(rel, []).append((host, text))
                if rel == TABLES[0]:
                    devices.update(dict.fromkeys(_device_rows(text), host))
                continue
            if rel == SUMMARY:
                summaries[host] = json.loads(src.read_text() or "{}")
                continue
            if rel.startswith("fleet/") and src.suffix == ".csv" and src.name not in FLEET_NOT_SEND_LOGS \
                    and DEVICE_FILE.fullmatch(src.stem):
                devices[src.stem] = host
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
    for rel, parts in tables.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(merge_tables(parts))
    if summaries:
        write_json_atomic(dest / SUMMARY, merge_summaries(summaries) if len(mapped) > 1 else summaries[
            next(iter(summaries))])
    if devices:
        (dest / FLEET_HOSTS).write_text("device,host\n" + "".join(f"{d},{h}\n" for d, h in sorted(devices.items())))
    return devices
