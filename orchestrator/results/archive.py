"""Pack a results bundle into BUNDLE.tar.gz with SHA256SUMS inside, and check such an archive.

Secrets (every file orchestrator/model/layout.py declares in SECRET_FILES: private keys, passwords, TLS
key logs in any file, a board's serial log and transcript, the lab's inventory) are left out unless asked;
the manifest records which files were left out, and the CLI names them. A secret VALUE found in a file
that is packed (a plain cell's password in its capture) is overwritten in the archive's copy
(results/scrub.py), and the manifest says where.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from orchestrator.errors import TestbedError
from orchestrator.model.layout import MANIFEST, SECRET_MODE, BundleLayout, is_secret, secrets_in_bundle
from orchestrator.results.manifest import load_manifest, save_manifest
from orchestrator.results.scrub import known_secrets, scrubbed_copy
from orchestrator.results.space import write_failed

SUMS = "SHA256SUMS"


def _sha256_stream(fh: IO[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """A file's sha256, read 1 MiB at a time."""
    with path.open("rb") as fh:
        return _sha256_stream(fh)


def archive(bundle: Path, *, include_secrets: bool = False, dest: Path | None = None) -> tuple[Path, list[str]]:
    """DIR -> DIR.tar.gz with SHA256SUMS inside; secrets left out unless asked (the manifest says which), and
    a secret value found in another file (a plain cell's password in its capture) overwritten in the copy."""
    manifest = load_manifest(bundle)
    manifest_path = BundleLayout(bundle).manifest
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and p != manifest_path)
    included: list[str] = []
    excluded: list[str] = []
    for p in files:
        rel = p.relative_to(bundle).as_posix()
        (excluded if is_secret(rel) and not include_secrets else included).append(rel)
    dest = dest or bundle.with_name(bundle.name + ".tar.gz")
    with tempfile.TemporaryDirectory(prefix=".testbed-scrub-", dir=dest.parent) as tmpdir:
        sources = {rel: bundle / rel for rel in included}
        scrubbed = {} if include_secrets else _scrub(bundle, sources, Path(tmpdir))
        manifest["secrets_in_bundle"] = secrets_in_bundle()  # this version's declaration (an older one knew less)
        manifest["archive"] = {"secrets_included": include_secrets, "excluded": excluded, "scrubbed": scrubbed,
                               "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        save_manifest(bundle, manifest)
        sources[MANIFEST] = manifest_path
        _pack(bundle.name, sources, dest, private=any(is_secret(rel) for rel in included))
    return dest, excluded


def _scrub(bundle: Path, sources: dict[str, Path], tmpdir: Path) -> dict[str, int]:
    """Files holding a secret value are packed from a copy with it overwritten (results/scrub.py): {file: how
    many values}; ``sources`` then names the copies."""
    secrets = known_secrets(bundle)
    done: dict[str, int] = {}
    if secrets is None:
        return done
    for i, rel in enumerate(sorted(sources)):
        copy = tmpdir / str(i)
        found = scrubbed_copy(sources[rel], secrets, copy)
        if found:
            sources[rel] = copy
            done[rel] = found
    return done


def _pack(top: str, sources: dict[str, Path], dest: Path, *, private: bool = False) -> None:
    """The archive at ``dest``, whole or not at all: a failure (a full disk) or Ctrl-C leaves no temporary file
    and an earlier archive as it was. Its mode is the umask's, or 0600 when it holds secrets (``private``)."""
    sums = "".join(f"{file_sha256(sources[rel])}  {rel}\n" for rel in sorted(sources))
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for rel in sorted(sources):
                tar.add(sources[rel], arcname=f"{top}/{rel}", recursive=False)
            data = sums.encode()
            info = tarfile.TarInfo(f"{top}/{SUMS}")
            info.size = len(data)
            info.mtime = int(dt.datetime.now(dt.UTC).timestamp())
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        if private:
            os.chmod(tmp, SECRET_MODE)
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_failed(dest, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def verify(archive_path: Path) -> tuple[int, list[str]]:
    """Check every checksum of an archive; (files checked, problems)."""
    if not archive_path.is_file():
        raise TestbedError(f"no such archive: {archive_path}")
    problems: list[str] = []
    try:
        with tarfile.open(archive_path, "r:gz") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            sums_name = next((n for n in members if n.endswith(f"/{SUMS}") and n.count("/") == 1), None)
            if sums_name is None:
                raise TestbedError(f"{archive_path}: no {SUMS} inside; not a testbed archive")
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
                    problems.append(f"not in {SUMS}: {rel}")
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise TestbedError(f"{archive_path}: cannot read the archive: {exc}") from None
    return len(listed), problems
