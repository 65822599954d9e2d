"""Atomic file writes: a temporary file in the same folder, fsync, then os.replace.

Readers (and a crash) see the old file or the new one, never a part of one; a write that fails (a full disk,
Ctrl-C) leaves no temporary file. A file is written with the mode the umask gives, except a declared secret or
private file (a capture), 0600 (results/space.py default_mode); a full disk is a DiskFull error naming the file
(results/space.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator.errors import TestbedError
from orchestrator.model.layout import SECRET_MODE, is_private
from orchestrator.results.space import default_mode, write_failed


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> Path:
    """``data`` into ``path``; ``mode`` None: default_mode (0600 for a secret file, else the umask's)."""
    return write_chunks_atomic(path, (data,), mode)


def write_chunks_atomic(path: Path, chunks: Iterable[bytes], mode: int | None = None) -> Path:
    """The ``chunks`` one after the other into ``path`` (written as they come: the whole never in memory)."""
    mode = default_mode(path) if mode is None else mode
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_failed(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            for data in chunks:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise write_failed(path, exc) from None
    except BaseException:  # the chunks' maker failed, or Ctrl-C: no temporary file left behind
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def make_new_folder(path: Path) -> Path:
    """A folder no one else has: ``path`` made, or when it exists ``path-2``, ``path-3``, ... (each made with mkdir
    without exist_ok, so of two processes that want one name at once only one gets it); the folder made."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failed(path, exc) from None
    for n in range(1, 10_000):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_failed(candidate, exc) from None
        return candidate
    raise TestbedError(f"{path}: 10000 folders of this name exist already", hint="give --out")


def remove_partial_writes(folder: Path) -> list[Path]:
    """Remove the temporary files of atomic writes that never finished in ``folder`` and below: ours clean up after
    themselves, but a program in a container that hit a full disk or was killed mid-write (the subscriber's status,
    the device's summary: NAME.tmp) cannot. The files removed."""
    found = [p for p in folder.rglob("*.tmp") if p.is_file()] if folder.is_dir() else []
    for path in found:
        path.unlink(missing_ok=True)
    return found


def copy_file_atomic(source: Path, path: Path) -> Path:
    """A copy of ``source`` at ``path`` with the mode ``path`` declares (a lab inventory's copy: 0600)."""
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise TestbedError(f"{source}: cannot read: {exc.strerror or exc}") from None
    return write_bytes_atomic(path, data)


def write_text_atomic(path: Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def open_with_mode(path: Path, *, append: bool = False) -> BinaryIO:
    """``path`` open for writing (emptied, or ``append``), with its mode from its creation on (default_mode: 0600
    for a secret or private file, such as a cut of a capture); a file that was there gets that mode too."""
    mode = default_mode(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), mode)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab" if append else "wb")


def protect_secrets(root: Path) -> list[Path]:
    """Every declared secret or private file (a capture) under ``root`` made 0600 (whatever wrote it: a container,
    a copy from a lab host); the files whose mode changed."""
    changed = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and is_private(p.relative_to(root)) \
                and p.stat().st_mode & 0o777 != SECRET_MODE:
            try:
                p.chmod(SECRET_MODE)
            except OSError as exc:
                raise TestbedError(f"{p}: cannot make it private (0600): {exc.strerror or exc}") from None
            changed.append(p)
    return changed


def read_json_strict(path: Path) -> Any:
    """The JSON value in ``path``; TestbedError naming the file (and line) when it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TestbedError(f"{path}: missing") from None
    except OSError as exc:
        raise TestbedError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TestbedError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise TestbedError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; {} when the file is missing or unreadable."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
