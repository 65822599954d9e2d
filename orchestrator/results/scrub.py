"""Secret VALUES inside files that are not secret files: overwritten in the archive's copy.

A plain MQTT CONNECT carries its user name and password in clear: a plain cell whose broker demanded the
run's passwords (a board's cell, orchestrator/lab/board_side.py) has them in capture/capture.pcapng. The
archive packs every file in which a known secret value occurs (the passwords of the bundle's password
files, the base64 lines of its private keys) with each occurrence overwritten by ``*`` of the same length:
every size, and so every measured result, is unchanged; the manifest names each file and how many values
were overwritten (results/archive.py). The bundle's own files are not touched.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from orchestrator.model.layout import secret_kind

CHUNK = 1 << 22
MIN_SECRET = 8  # shorter values would match by chance (the run's passwords are 24 characters)


def _values(path: Path) -> set[bytes]:
    """The secret values in one declared secret file: passwords (``user:password`` lines, or a file holding a
    password alone) and the base64 lines of a PEM private key."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return set()
    if path.suffix == ".key":
        return {ln.strip() for ln in lines if ln.strip() and not ln.startswith(b"-----")}
    if "passw" in path.name.lower():
        return {ln.split(b":", 1)[1] if b":" in ln else ln for ln in lines if ln.strip()}
    return set()


@dataclass(frozen=True)
class Secrets:
    """The secret values of a bundle as one pattern, and the longest one's length."""

    pattern: re.Pattern[bytes]
    longest: int


def known_secrets(bundle: Path) -> Secrets | None:
    """Every secret value of the bundle's declared secret files (None when there is none)."""
    values: set[bytes] = set()
    for p in bundle.rglob("*"):
        if p.is_file() and secret_kind(p.relative_to(bundle)) is not None:
            values |= {v for v in _values(p) if len(v) >= MIN_SECRET}
    if not values:
        return None
    ordered = sorted(values, key=len, reverse=True)
    return Secrets(re.compile(b"|".join(re.escape(v) for v in ordered)), len(ordered[0]))


def scrub(src: IO[bytes], secrets: Secrets, out: IO[bytes] | None = None) -> int:
    """Copy ``src`` to ``out`` (None: only count) with every secret value overwritten by ``*`` of the same
    length; the number of values found. A value across two chunks is found: the last ``longest - 1`` bytes
    of each chunk wait for the next one."""
    keep = secrets.longest - 1
    count = 0
    carry = b""

    def stars(m: re.Match[bytes]) -> bytes:
        nonlocal count
        count += 1
        return b"*" * len(m.group(0))

    while True:
        chunk = src.read(CHUNK)
        buf = secrets.pattern.sub(stars, carry + chunk)
        if not chunk:
            if out is not None:
                out.write(buf)
            return count
        cut = max(0, len(buf) - keep)
        if out is not None:
            out.write(buf[:cut])
        carry = buf[cut:]


def scrubbed_copy(src: Path, secrets: Secrets, dest: Path) -> int:
    """``src`` into ``dest`` with the secret values overwritten (none found: nothing is written)."""
    with src.open("rb") as fh:
        found = scrub(fh, secrets)
    if found:
        with src.open("rb") as fh, dest.open("wb") as out:
            scrub(fh, secrets, out)
        shutil.copymode(src, dest)
    return found
