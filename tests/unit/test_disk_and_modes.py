"""Disk and files (issue 23 part 5): a full disk names the file (and how to resume a sweep), keeps what was there and
leaves no temporary file, in an atomic write and in an archive; a sweep's cell that would not fit is refused by name
before it starts; files follow the umask, secrets are 0600.

A full disk is injected at the write (OSError ENOSPC) and, as root, made for real with a small tmpfs.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.model.layout import BundleLayout
from orchestrator.model.run import RunSpec
from orchestrator.model.sweep import SweepPlan
from orchestrator.results import archive, atomic, space
from orchestrator.results.space import DiskFull, check_cell_space, expected_cell_bytes
from tests.skips import skip_or_fail

RESUME = "free some space on that disk; finished cells are kept: testbed sweep --resume"


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def small_bundle(root: Path) -> Path:
    """A bundle with one run: a public file, a key and a key log."""
    b = root / "bundle"
    (b / "runs" / "c" / "pki").mkdir(parents=True)
    (b / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    (b / "runs" / "c" / "metrics.json").write_text("{}")
    (b / "runs" / "c" / "pki" / "server.key").write_text("secret")
    return b


def spec(**values: Any) -> RunSpec:
    return RunSpec.model_validate({"scenario": "plain", **values})


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".tmp"))


def enospc(*_args: Any, **_kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(("mask", "public"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664), (0o077, 0o600)],
                         ids=["022", "027", "002", "077"])
def test_files_follow_the_umask_and_secrets_are_0600_whatever_it_is(tmp_path: Path, mask: int, public: int) -> None:
    with umask(mask):
        assert space.current_umask() == mask
        made = atomic.write_text_atomic(tmp_path / "metrics.json", "{}")
        secret = atomic.write_text_atomic(tmp_path / "pki" / "server.key", "k")
        inventory = atomic.copy_file_atomic(made, tmp_path / "logs" / "passwords.txt")
    assert made.stat().st_mode & 0o777 == public
    assert secret.stat().st_mode & 0o777 == 0o600
    assert inventory.stat().st_mode & 0o777 == 0o600


def test_a_full_disk_names_the_file_and_the_resume_command_keeps_the_old_file_and_leaves_no_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = small_bundle(tmp_path)
    cell = bundle / "runs" / "c" / "cell.json"
    atomic.write_json_atomic(cell, {"status": "ok"})
    monkeypatch.setattr(atomic.os, "fsync", enospc)
    for path in (cell, bundle / "manifest.json"):
        before = path.read_bytes()
        with pytest.raises(DiskFull) as exc:
            atomic.write_json_atomic(path, {"status": "changed"})
        assert exc.value.message == f"disk full: cannot write {path}"
        assert exc.value.hint == f"{RESUME} {bundle}"
        assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_a_write_outside_a_bundle_on_a_full_disk_says_so_without_a_resume_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomic.os, "fsync", enospc)
    with pytest.raises(DiskFull) as exc:
        atomic.write_text_atomic(tmp_path / "a.txt", "x")
    assert exc.value.hint == "free some space on that disk"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("fault", "raised"), [(OSError(errno.ENOSPC, "No space left on device"), DiskFull),
                                               (KeyboardInterrupt(), KeyboardInterrupt)], ids=["disk-full", "ctrl-c"])
def test_an_archive_that_fails_midway_leaves_no_tmp_and_the_earlier_archive_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: BaseException, raised: type[BaseException]) -> None:
    bundle = small_bundle(tmp_path)
    dest, _excluded = archive.archive(bundle)
    before = dest.read_bytes()
    (bundle / "runs" / "c" / "summary.csv").write_text("a,b\n")

    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise fault

    monkeypatch.setattr(archive.tarfile.TarFile, "addfile", fail)
    with pytest.raises(raised) as exc:
        archive.archive(bundle)
    if isinstance(exc.value, DiskFull):
        assert exc.value.message == f"disk full: cannot write {dest}"
    assert dest.read_bytes() == before
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob(".testbed-scrub-*"))


def test_an_archive_follows_the_umask_and_is_0600_when_it_holds_secrets(tmp_path: Path) -> None:
    bundle = small_bundle(tmp_path)
    with umask(0o027):
        public, _ = archive.archive(bundle)
        private, _ = archive.archive(bundle, include_secrets=True, dest=tmp_path / "all.tar.gz")
    assert public.stat().st_mode & 0o777 == 0o640
    assert private.stat().st_mode & 0o777 == 0o600


def test_the_expected_size_of_a_cell_grows_with_its_messages_and_payload() -> None:
    small = spec(samples=10, payload=65)
    assert expected_cell_bytes(spec(samples=1000, payload=65)) > expected_cell_bytes(small)
    assert expected_cell_bytes(spec(samples=10, payload=4096)) > expected_cell_bytes(small)
    fleet = spec(samples=10, payload=65, devices=100)
    assert expected_cell_bytes(fleet) > expected_cell_bytes(small)


def test_a_cell_that_would_not_fit_is_refused_by_name_with_the_resume_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = spec(samples=100_000, payload=1024)
    need = expected_cell_bytes(big)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _p: usage._replace(free=need - 1))
    with pytest.raises(DiskFull) as exc:
        check_cell_space(tmp_path, big, "tls-1024B-none-r1")
    assert exc.value.message.startswith(f"cell tls-1024B-none-r1 needs about {need / 1e6:.0f} MB and only ")
    assert exc.value.message.endswith("it was not started")
    assert exc.value.hint == f"{RESUME} {tmp_path}"
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _p: usage._replace(free=need))
    check_cell_space(tmp_path, big, "tls-1024B-none-r1")  # room enough: nothing said


def test_a_disk_that_fills_while_a_cell_runs_ends_it_naming_the_disk_and_the_resume_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = small_bundle(tmp_path)
    run = bundle / "runs" / "plain-65B-none-r1"
    run.mkdir(parents=True)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _p: usage._replace(free=space.FULL_BELOW_BYTES))
    space.check_still_room(run)  # exactly the margin left: not full yet
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _p: usage._replace(free=space.FULL_BELOW_BYTES - 1))
    with pytest.raises(DiskFull) as exc:
        space.check_still_room(run)
    assert exc.value.message == f"disk full while the cell ran: {space.FULL_BELOW_BYTES - 1} bytes left on the disk " \
        f"of {run}"
    assert exc.value.hint == f"{RESUME} {bundle}"


def test_the_cells_count_stops_at_once_when_its_disk_fills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """count_messages checks the disk with the containers (once a second), not only at the cell's timeout."""
    import time

    from orchestrator.measure import local
    from orchestrator.model.layout import Layout

    lay = Layout(tmp_path / "run")
    lay.root.mkdir()
    monkeypatch.setattr(local.compose, "containers", lambda: [])
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _p: usage._replace(free=1000))
    started = time.monotonic()
    with pytest.raises(DiskFull, match="disk full while the cell ran: 1000 bytes left"):
        local.count_messages(lay, spec(samples=100), lambda _n, _t: None)
    assert time.monotonic() - started < 2.0


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root only: CI runs as root); unmounted afterwards."""
    if os.geteuid() != 0:
        skip_or_fail("needs root to mount a tmpfs (CI runs as root)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_real_full_disk_keeps_the_finished_files_and_leaves_no_tmp(full_tmpfs: Path) -> None:
    bundle = small_bundle(full_tmpfs)
    finished = atomic.write_bytes_atomic(bundle / "runs" / "c" / "per_message.csv", b"seq\n" * 1000)
    with pytest.raises(DiskFull) as exc:
        atomic.write_bytes_atomic(bundle / "runs" / "d" / "capture.pcapng", b"\0" * (2 << 20))
    assert "--resume" in (exc.value.hint or "")
    assert finished.read_bytes() == b"seq\n" * 1000
    assert leftovers(full_tmpfs) == []
    with pytest.raises(DiskFull):
        check_cell_space(bundle, spec(samples=1000), "plain-65B-none-r1")


class Quiet:
    """A sweep's progress that says nothing."""

    def cell_started(self, *_args: Any) -> None: ...
    def messages(self, *_args: Any) -> None: ...
    def cell_finished(self, *_args: Any) -> None: ...
    def note(self, *_args: Any) -> None: ...


def test_a_sweep_refuses_the_cell_that_would_not_fit_by_name_before_it_starts_and_keeps_the_finished_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.measure import sweep

    plan = SweepPlan.model_validate({"payloads": [65]})
    first, second = plan.cells()
    bundle = small_bundle(tmp_path)
    done = BundleLayout(bundle).run(first.cell_id).root
    done.mkdir(parents=True)
    (done / "cell.json").write_text(json.dumps({"status": "ok"}))
    before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(space.shutil, "disk_usage", lambda _p: usage._replace(free=1 << 20))
    monkeypatch.setattr(sweep, "execute_run", lambda *_a, **_k: pytest.fail("the cell started"))
    with pytest.raises(DiskFull) as exc:
        sweep.run_cells(bundle, plan, [second], Quiet())
    assert exc.value.message.startswith(f"cell {second.cell_id} needs about ")
    assert exc.value.hint == f"{RESUME} {bundle}"
    assert {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()} == before
