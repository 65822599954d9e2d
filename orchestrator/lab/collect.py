"""What the lab's hosts recorded, back in the LOCAL run folder under the names of a single-host run.

The broker host's archive gives capture/capture.pcapng, logs/subscriber.csv, logs/subscriber_status.json and
keylogs/; the publisher host's gives logs/publisher.csv, publisher_summary.json (publisher_connections.csv, or
logs/fleet/ for a fleet) and keylogs/. Each host's process logs and exit codes go to logs/hosts/<host>/.

Several publisher hosts (a fleet dealt over them): each host's logs are mapped with its own estimate and merged
(lab/merge.py: a ``host`` column in the per-connection tables, logs/fleet_hosts.csv); logs/host_clock.json keeps
every host's record under ``hosts``.

Clocks: the publisher host stamps its logs with its own clock, the capture and the subscriber with the broker
host's. The clock exchanges before and after the cell (orchestrator/clients/clock_probe.py against the time
echo) give the offset and its bound (orchestrator/analysis/clock.py, the rule of the board's path): the send
logs in logs/ are mapped to the broker host's clock with it (as a board's are to the lab's), the publisher's
own are kept in logs/hosts/<publisher>/, and logs/host_clock.json holds the estimate, or why there is none.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.analysis import clock
from orchestrator.backends.multihost import LabHost, LabRoles
from orchestrator.errors import TestbedError
from orchestrator.lab import merge
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import open_with_mode, write_json_atomic

TIME_COLUMN = re.compile(r"^t_\w*_us$")
# what of each host's description (playbooks/templates/lab_facts.sh.j2) is "what runs there", by role
VERSIONS = {"broker": ("mosquitto", "dumpcap", "subscriber_python", "python", "docker"),
            "publisher": ("vdevice", "fleet", "mbedtls", "python"),
            "router": ("tc", "nft", "python")}


CAPACITY = ("cores", "mem_available_kb", "cgroup_memory_limit_kb", "cgroup_memory_room_kb", "address_space_limit_kb",
            "overcommit", "commit_room_kb", "nofile_hard", "nproc_hard", "ephemeral_ports")


def host_facts(text: str) -> dict[str, str]:
    """``key=value`` lines (what lab_facts.sh.j2 prints) as a mapping; empty values and other lines left out."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[a-z_]+", key) and value.strip():
            out[key] = value.strip()
    return out


def host_record(host: LabHost, facts: dict[str, str], host_clock: dict[str, Any] | None = None) -> dict[str, Any]:
    """One host in cell.json / the manifest: name, address, role, kernel, versions, its clock."""
    record: dict[str, Any] = {"name": host.name, "address": host.address, "role": host.role,
                              "kernel": facts.get("kernel"), "os": facts.get("os"),
                              "versions": {k: facts[k] for k in VERSIONS[host.role] if k in facts}}
    if host.role == "broker":
        record["clock"] = {"reference": True, "offset_us": 0.0, "bound_us": 0.0,
                           "note": "the capture and the subscriber stamp with this host's clock"}
    elif host.role == "publisher":
        record["clock"] = clock_summary(host_clock)
        record["capacity"] = {k: facts[k] for k in CAPACITY if k in facts}  # orchestrator/clients/capacity.py
    return record


def clock_summary(host_clock: dict[str, Any] | None) -> dict[str, Any]:
    if not host_clock or not host_clock.get("available"):
        return {"available": False, "reason": (host_clock or {}).get("reason") or "no clock exchange"}
    return {"available": True, "offset_us": host_clock["pre"]["offset_us"],
            "offset_post_us": host_clock["post"]["offset_us"], "bound_us": host_clock["bound_us"],
            "drift_ppm": host_clock["drift_ppm"], "rtt_min_us": host_clock["pre"]["rtt_min_us"]}


def read_samples(path: Path) -> list[clock.TimeSample]:
    """clock_probe.py's CSV (t1_us,t2_us,t3_us,t4_us); none when the file is missing."""
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
    except OSError:
        return []
    return [clock.TimeSample(int(r["t1_us"]), int(r["t2_us"]), int(r["t3_us"]), int(r["t4_us"])) for r in rows]


def host_clock_estimate(folder: Path, publisher: str, broker: str) -> tuple[clock.ClockEstimate | None, dict[str, Any]]:
    """The publisher host's clock against the broker host's, from the exchanges in ``folder``; its record."""
    where = {"host": publisher, "reference": broker, "method": "NTP-style exchanges with the broker host's time "
             "echo before and after the cell (orchestrator/clients/clock_probe.py)"}
    try:
        est = clock.estimate_clock(read_samples(folder / "clock_pre.csv"), read_samples(folder / "clock_post.csv"))
    except clock.ClockSyncError as exc:
        return None, {"available": False, "reason": exc.message, **where}
    return est, {"available": True, **est.as_dict(), **where}


def map_times(text: str, est: clock.ClockEstimate) -> str:
    """A CSV log with every ``t_*_us`` column mapped from the publisher host's clock to the broker host's."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    cols = [i for i, name in enumerate(rows[0]) if TIME_COLUMN.match(name)]
    for row in rows[1:]:
        for i in cols:
            if i < len(row) and row[i].strip().lstrip("-").isdigit():
                row[i] = str(round(est.to_lab(int(row[i])).lab_us))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def safe_member(name: str) -> bool:
    """A relative path that stays inside the folder it is extracted to."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def unpack(archive: Path, dest: Path) -> bool:
    """Extract a host's archive into ``dest`` (data only: no links out, no devices); False when there is none."""
    if not archive.is_file():
        return False
    try:
        with tarfile.open(archive, "r:gz") as tar:
            safe = [m for m in tar.getmembers() if safe_member(m.name) and (m.isfile() or m.isdir())]
            for member in safe:  # no links, devices or paths out of ``dest`` (Python < 3.11.4 has no filter)
                member.mode = (member.mode & 0o755) | (0o700 if member.isdir() else 0o600)
                tar.extract(member, dest, set_attrs=member.isfile())
    except (tarfile.TarError, OSError) as exc:
        raise TestbedError(f"cannot unpack the records fetched from a lab host ({archive.name}): {exc}") from exc
    return True


def _copy_tree(src: Path, dest: Path) -> None:
    """``src``'s files into ``dest``, each with the mode the run folder gives it from its creation (a capture, a key
    log: 0600; orchestrator/model/layout.py), whatever mode it came with."""
    for path in sorted(src.rglob("*")) if src.is_dir() else []:
        if path.is_file() and not path.is_symlink():
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            with path.open("rb") as fin, open_with_mode(target) as fout:
                shutil.copyfileobj(fin, fout)


def _host_files(got: Path, lay: Layout, host: str) -> Path:
    """procs/ (logs, exit codes, command lines) and clock/ into logs/hosts/<host>/."""
    folder = lay.host_logs(host)
    folder.mkdir(parents=True, exist_ok=True)
    for p in sorted((got / "procs").glob("*")):
        if p.suffix in (".log", ".rc", ".argv"):
            shutil.copyfile(p, folder / p.name)
    for p in sorted((got / "clock").glob("*")):
        if p.suffix in (".csv", ".json"):
            shutil.copyfile(p, folder / f"clock_{p.name}")
    return folder


def collect_broker(archive: Path, lay: Layout, host: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="testbed-collect-") as tmp:
        if not unpack(archive, Path(tmp)):
            return False
        got = Path(tmp)
        for sub in ("capture", "logs", "keylogs"):
            _copy_tree(got / "run" / sub, lay.root / sub)
        _host_files(got, lay, host)
    return True


def time_discipline(folder: Path) -> dict[str, Any]:
    """The host's time discipline before and after the cell (clock_probe.py --discipline) and whether its kernel
    clock was slewed meanwhile: an offset being slewed away, or a frequency correction that changed, breaks the
    linear drift the bound assumes (a warning, runanalysis/labanalysis.py)."""
    phases = {}
    for phase in ("pre", "post"):
        try:
            phases[phase] = json.loads((folder / f"clock_{phase}_discipline.json").read_text())
        except (OSError, ValueError):
            continue
    kernel = [p.get("adjtimex") or {} for p in phases.values()]
    kernel = [k for k in kernel if k.get("available")]
    slewing = any(k.get("offset_us") for k in kernel) or len({k.get("freq_ppm") for k in kernel}) > 1
    daemons = sorted({d for p in phases.values() for d in p.get("daemons") or []})
    return {**phases, "daemons": daemons, "slewing": bool(slewing),
            "recorded": bool(kernel)}


def collect_publisher(archive: Path, lay: Layout, roles: LabRoles, host: LabHost,
                      mapped: Path) -> dict[str, Any] | None:
    """A publisher host's logs, their times on the broker host's clock when there is an estimate, into ``mapped``
    (lab/merge.py merges every host's into logs/) and, as recorded, into logs/hosts/<host>/; keylogs/ (named after
    the host when there are several). The host's clock record (None: no archive)."""
    several = len(roles.publishers) > 1
    with tempfile.TemporaryDirectory(prefix="testbed-collect-") as tmp:
        if not unpack(archive, Path(tmp)):
            return None
        got = Path(tmp)
        folder = _host_files(got, lay, host.name)
        est, record = host_clock_estimate(folder, host.name, roles.broker.name)
        record["discipline"] = time_discipline(folder)
        for key in sorted((got / "run" / "keylogs").glob("*.keys")):
            name = f"{key.stem}.{host.name}.keys" if several else key.name
            with key.open("rb") as fin, open_with_mode(lay.keylogs / name) as fout:
                shutil.copyfileobj(fin, fout)
        logs = got / "run" / "logs"
        _copy_tree(logs, folder)  # as the publisher host wrote them, on its own clock
        for src in sorted(p for p in logs.rglob("*") if p.is_file()):
            dest = mapped / src.relative_to(logs)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if est is not None and src.suffix == ".csv":
                dest.write_text(map_times(src.read_text(), est))
            else:
                shutil.copyfile(src, dest)
    return record


def widest(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The clock record the run's one-way delay verdict takes: a host without an estimate, else the widest bound."""
    missing = [r for r in records.values() if not r.get("available")]
    if missing:
        return missing[0]
    return max(records.values(), key=lambda r: r.get("bound_us") or 0)


def collect_publishers(folder: Path, lay: Layout, roles: LabRoles) -> dict[str, dict[str, Any] | None]:
    """Every publisher host's archive (``folder``/<host>.tgz): host -> its clock record (None: no archive).
    Their logs are merged into logs/ (lab/merge.py: the per-connection tables get a ``host`` column) and
    logs/host_clock.json holds every host's record under ``hosts``, the worst host's figures at its top (the
    run's one-way delay verdict: with one host, that host's)."""
    out: dict[str, dict[str, Any] | None] = {}
    with tempfile.TemporaryDirectory(prefix="testbed-merge-") as tmp:
        mapped = {h.name: Path(tmp) / h.name for h in roles.publishers}
        for h in roles.publishers:
            mapped[h.name].mkdir()
            out[h.name] = collect_publisher(folder / f"{h.name}.tgz", lay, roles, h, mapped[h.name])
        merge.merge_logs({h: m for h, m in mapped.items() if out[h] is not None}, lay.logs)
    records = {h: r or {"available": False, "reason": f"no records came back from {h}", "host": h}
               for h, r in out.items()}
    write_json_atomic(lay.host_clock, {**widest(records), "hosts": records})
    return out
