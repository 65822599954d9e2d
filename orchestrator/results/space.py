"""Disk space and file modes of what we write.

- A full disk (or quota) is a DiskFull error naming the file and, when the file is in a results bundle, the
  command that resumes the sweep once there is room (results/atomic.py raises it; finished cells are intact:
  every file is replaced atomically).
- Before each cell of a sweep, the free space is compared with what the cell is expected to write
  (``expected_cell_bytes``): a cell that would not fit is refused by name before it starts.
- While a cell runs, a disk with less than ``FULL_BELOW_BYTES`` left has filled since its check (which asked for
  several MB): ``check_still_room`` ends the cell within a second, naming the disk, instead of at its timeout (its
  subscriber can no longer write the messages it receives, so they would only look lost).
- Files are written with the mode the umask gives, except the declared secret files
  (orchestrator/model/layout.py SECRET_FILES), always 0600.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from orchestrator.errors import TestbedError
from orchestrator.model.layout import MANIFEST, SECRET_MODE, is_private
from orchestrator.model.run import RunSpec

FULL = (errno.ENOSPC, errno.EDQUOT)
# what a cell writes beyond its messages: configuration, PKI, logs, metrics, the tables' headers, the analysis's
# temporary files
CELL_FIXED_BYTES = 8 * 1024 * 1024
# per message beyond its payload: the capture (the reference captures hold 530-640 B per message: lat_t12aes.pcap
# 191 kB for 300, bench_plain_and_t12chacha.pcap 13.3 MB for 25,000), the device's send log, the subscriber's
# log, a per_message.csv row and packets.csv rows (a few hundred bytes more); with a margin
PER_MESSAGE_BYTES = 2 * 1024
PAYLOAD_COPIES = 4  # the payload's bytes: in the capture (twice: to and from the broker), in both logs
FULL_BELOW_BYTES = 1024 * 1024  # a cell's disk this close to full is full: its next tables and logs will not fit


class DiskFull(TestbedError):
    """No room left for a file (or a cell): which one, and what to do."""


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status; elsewhere set and set back)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(path: Path) -> int:
    """0600 for a declared secret or private file (a capture); else what the umask leaves of 0666 (0644 under the
    usual 022)."""
    return SECRET_MODE if is_private(path) else 0o666 & ~current_umask()


def bundle_of(path: Path) -> Path | None:
    """The results bundle ``path`` is in (its manifest, a run folder's file, or one or two levels below), if any."""
    return next((p for p in list(path.parents)[:5] if (p / MANIFEST).is_file()), None)


def resume_hint(bundle: Path | None) -> str:
    resume = f"; finished cells are kept: testbed sweep --resume {bundle}" if bundle else ""
    return f"free some space on that disk{resume}"


def write_failed(path: Path, exc: OSError) -> TestbedError:
    """The error for a write of ``path`` that failed: DiskFull when the disk (or the quota) is full."""
    if exc.errno not in FULL:
        return TestbedError(f"{path}: cannot write: {exc.strerror or exc}")
    return DiskFull(f"disk full: cannot write {path}", hint=resume_hint(bundle_of(path)))


def expected_cell_bytes(spec: RunSpec) -> int:
    """What one cell of ``spec`` is expected to write into its run folder (an upper estimate)."""
    return CELL_FIXED_BYTES + spec.messages_expected * (PER_MESSAGE_BYTES + PAYLOAD_COPIES * spec.payload)


def check_cell_space(bundle: Path, spec: RunSpec, cell_id: str) -> None:
    """DiskFull naming the cell when the disk of ``bundle`` has less room than the cell is expected to need."""
    need = expected_cell_bytes(spec)
    try:
        free = shutil.disk_usage(bundle).free
    except OSError as exc:
        raise TestbedError(f"{bundle}: cannot read the free space: {exc.strerror or exc}") from None
    if free < need:
        raise DiskFull(f"cell {cell_id} needs about {need / 1e6:.0f} MB and only {free / 1e6:.0f} MB are free on "
                       f"the disk of {bundle}; it was not started", hint=resume_hint(bundle))


def check_still_room(folder: Path) -> None:
    """DiskFull when the disk of ``folder`` (a running cell's) has less than FULL_BELOW_BYTES left; an unreadable
    free space is not a verdict (the writes themselves will tell)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < FULL_BELOW_BYTES:
        raise DiskFull(f"disk full while the cell ran: {free} bytes left on the disk of {folder}",
                       hint=resume_hint(bundle_of(folder)))
