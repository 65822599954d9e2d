"""The results bundle: results/<UTC time>-<name>/ with manifest.json, runs/<cell>/, derived files.

Versioned (schema_version; a newer bundle is refused, an older one would be migrated here),
self-describing (tool version, git commit, command line, plan, seed, host, tool versions, image
digests, impairment state per cell) and written as it goes, atomically, so an interrupted sweep
loses nothing finished and resumes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import platform
import re
import shutil
import sys
import tarfile
from pathlib import Path
from typing import IO, Any

from orchestrator import __version__
from orchestrator.errors import TestbedError
from orchestrator.model.sweep import Cell, SweepPlan
from orchestrator.results.atomic import read_json, write_json_atomic

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
MIN_FREE_BYTES = 200 * 1024 * 1024
# secrets: never archived unless asked
SECRET_PATTERNS = (re.compile(r"(^|/)pki/[^/]+\.key$"), re.compile(r"(^|/)pki/passwords\.txt$"),
                   re.compile(r"(^|/)keylogs/[^/]+$"))


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def new_bundle_dir(out_root: Path, name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "sweep"
    return out_root / f"{utc_stamp()}-{safe}"


def check_writable(out_root: Path, min_free: int = MIN_FREE_BYTES) -> None:
    """A clear error before the first cell when --out cannot be written or the disk is (nearly) full."""
    try:
        out_root.mkdir(parents=True, exist_ok=True)
        probe = out_root / f".testbed-write-probe-{os.getpid()}"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as exc:
        raise TestbedError(f"cannot write results to {out_root}: {exc.strerror or exc}",
                           hint="choose another folder with --out") from None
    free = shutil.disk_usage(out_root).free
    if free < min_free:
        raise TestbedError(f"only {free / 1e6:.0f} MB free on the disk of {out_root}; a sweep needs at least "
                           f"{min_free / 1e6:.0f} MB", hint="free some space or choose another --out")


def load_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / MANIFEST
    if not path.is_file():
        raise TestbedError(f"{bundle} is not a results bundle (no {MANIFEST})")
    manifest = read_json(path)
    if not manifest:
        raise TestbedError(f"{path}: unreadable or empty manifest")
    version = manifest.get("schema_version")
    if not isinstance(version, int):
        raise TestbedError(f"{path}: schema_version missing")
    if version > SCHEMA_VERSION:
        raise TestbedError(f"{bundle} was written with results schema {version}, newer than this testbed "
                           f"understands ({SCHEMA_VERSION})", hint="upgrade testbed to read it")
    return manifest


def save_manifest(bundle: Path, manifest: dict[str, Any]) -> None:
    write_json_atomic(bundle / MANIFEST, manifest)


def git_commit() -> dict[str, Any]:
    from orchestrator.backends.process import run
    from orchestrator.paths import repo_root

    try:
        root = repo_root()
        head = run(["git", "-C", str(root), "rev-parse", "HEAD"], check=False, timeout=10)
        dirty = run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], check=False,
                    timeout=10)
    except TestbedError:
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": head.stdout.strip() or None,
            "git_dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}


def host_info() -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kernel": platform.release(), "machine": platform.machine(), "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version(), "os": platform.platform()}


def new_manifest(plan: SweepPlan, name: str, command: list[str], environment: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "tool_version": __version__,
        **git_commit(),
        "command": command,
        "plan": plan.model_dump(),
        "seed": plan.seed,
        "cell_order": [c.cell_id for c in plan.cells()],
        "environment": {"host": host_info(), **environment},
        "cells": {},
        "secrets_in_bundle": ["pki/*.key", "pki/passwords.txt", "keylogs/*"],
    }


def plan_of(manifest: dict[str, Any]) -> SweepPlan:
    return SweepPlan.model_validate(manifest["plan"])


def cell_status(bundle: Path, cell: Cell) -> str | None:
    return read_json(bundle / "runs" / cell.cell_id / "cell.json").get("status")


def missing_cells(bundle: Path, plan: SweepPlan) -> list[Cell]:
    """Cells not finished ok (never started, interrupted or failed): what --resume runs."""
    return [c for c in plan.cells() if cell_status(bundle, c) != "ok"]


def argv_for_display() -> list[str]:
    return ["testbed", *sys.argv[1:]] if sys.argv else ["testbed"]


# ---- archive / verify --------------------------------------------------------------------------

def is_secret(rel: str) -> bool:
    return any(p.search(rel) for p in SECRET_PATTERNS)


def _sha256_stream(fh: IO[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return _sha256_stream(fh)


def archive(bundle: Path, *, include_secrets: bool = False, dest: Path | None = None) -> tuple[Path, list[str]]:
    """DIR -> DIR.tar.gz with SHA256SUMS inside; secrets left out unless asked (the manifest says which)."""
    manifest = load_manifest(bundle)
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and p.name != MANIFEST)
    included: list[str] = []
    excluded: list[str] = []
    for p in files:
        rel = p.relative_to(bundle).as_posix()
        (excluded if is_secret(rel) and not include_secrets else included).append(rel)
    manifest["archive"] = {"secrets_included": include_secrets, "excluded": excluded,
                           "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    save_manifest(bundle, manifest)
    included.append(MANIFEST)
    sums = "".join(f"{_sha256(bundle / rel)}  {rel}\n" for rel in sorted(included))
    dest = dest or bundle.with_name(bundle.name + ".tar.gz")
    tmp = dest.with_name(f".{dest.name}.tmp")
    top = bundle.name
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in sorted(included):
            tar.add(bundle / rel, arcname=f"{top}/{rel}", recursive=False)
        data = sums.encode()
        info = tarfile.TarInfo(f"{top}/SHA256SUMS")
        info.size = len(data)
        info.mtime = int(dt.datetime.now(dt.UTC).timestamp())
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, dest)
    return dest, excluded


def verify(archive_path: Path) -> tuple[int, list[str]]:
    """Check every checksum of an archive; (files checked, problems)."""
    if not archive_path.is_file():
        raise TestbedError(f"no such archive: {archive_path}")
    problems: list[str] = []
    try:
        with tarfile.open(archive_path, "r:gz") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            sums_name = next((n for n in members if n.endswith("/SHA256SUMS") and n.count("/") == 1), None)
            if sums_name is None:
                raise TestbedError(f"{archive_path}: no SHA256SUMS inside; not a testbed archive")
            top = sums_name.split("/", 1)[0]
            sums_file = tar.extractfile(members[sums_name])
            assert sums_file is not None
            listed: dict[str, str] = {}
            for line in sums_file.read().decode().splitlines():
                digest, _, rel = line.partition("  ")
                listed[rel] = digest
            for rel, digest in listed.items():
                member = members.get(f"{top}/{rel}")
                if member is None:
                    problems.append(f"missing: {rel}")
                    continue
                fh = tar.extractfile(member)
                assert fh is not None
                if _sha256_stream(fh) != digest:
                    problems.append(f"checksum mismatch: {rel}")
            for name in members:
                rel = name.split("/", 1)[1] if "/" in name else name
                if name != sums_name and rel not in listed:
                    problems.append(f"not in SHA256SUMS: {rel}")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise TestbedError(f"{archive_path}: cannot read the archive: {exc}") from None
    return len(listed), problems
