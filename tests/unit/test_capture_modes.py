"""Every capture file we write is its owner's only (0600), whatever the umask: a plain CONNECT carries its password
in clear (orchestrator/model/layout.py PRIVATE_FILES). The capture container's own file is checked with the image
(tests/integration/test_capture_mode.py); here the files the orchestrator writes: a kept lab's per-cell cuts and its
gaps (lab/capture_split.py), a lab host's capture brought back (lab/collect.py), the lab host's archive of its
records (clients/labhost.py), and what protect_secrets makes private after a container wrote it."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.lab import collect
from orchestrator.lab.capture_split import CaptureSplitter
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import protect_secrets

FIXTURE = Path(__file__).parents[1] / "fixtures" / "connections" / "t12_session_id.pcapng"
REPO = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def test_a_kept_labs_cuts_and_gaps_are_0600_under_the_usual_umask(tmp_path: Path) -> None:
    lab = tmp_path / "blocks" / "lab-001" / "capture"
    lab.mkdir(parents=True)
    cut = tmp_path / "runs" / "c1" / "capture" / "capture.pcapng"
    (old := tmp_path / "runs" / "c2" / "capture" / "capture.pcapng").parent.mkdir(parents=True)
    old.write_bytes(b"an earlier attempt's")
    os.chmod(old, 0o644)
    with _umask(0o022):
        split = CaptureSplitter(FIXTURE, lab / "gaps.pcapng")
        first = split.cut("c1", 0.0, 1e12, cut)
        split.cut("c2", 1e12, 2e12, old)
        split.finish()
    assert first.packets > 0
    modes = {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in (cut, old, lab / "gaps.pcapng")}
    assert modes == {"runs/c1/capture/capture.pcapng": "0o600", "runs/c2/capture/capture.pcapng": "0o600",
                     "blocks/lab-001/capture/gaps.pcapng": "0o600"}


def _archive(path: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_lab_hosts_capture_lands_0600_in_the_run_folder(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "run")
    lay.logs.mkdir(parents=True)
    with _umask(0o022):
        assert collect.collect_broker(_archive(tmp_path / "b1.tgz", {
            "run/capture/capture.pcapng": (b"pcapng with a CONNECT", 0o644),
            "run/logs/subscriber.csv": (b"seq\n", 0o644), "run/keylogs/subscriber.keys": (b"CLIENT_RANDOM", 0o644),
            "procs/broker.rc": (b"0\n", 0o644)}), lay, "b1")
    assert lay.capture.read_bytes() == b"pcapng with a CONNECT"
    assert _mode(lay.capture) == 0o600
    assert _mode(lay.keylogs / "subscriber.keys") == 0o600
    assert _mode(lay.subscriber_log) == 0o644  # the rest as the umask gives


def test_the_lab_hosts_archive_of_its_records_is_0600(tmp_path: Path) -> None:
    (tmp_path / "run" / "capture").mkdir(parents=True)
    (tmp_path / "run" / "capture" / "capture.pcapng").write_bytes(b"x")
    done = subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0o022); "
                           "from orchestrator.clients import labhost; sys.exit(labhost.main(sys.argv[1:]))",
                           "--dir", str(tmp_path), "finish", "--pack", "collect.tgz", "run/capture"],
                          capture_output=True, text=True, timeout=30, check=False, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert _mode(tmp_path / "collect.tgz") == 0o600
    with tarfile.open(tmp_path / "collect.tgz") as tar:
        assert "run/capture/capture.pcapng" in tar.getnames()


def test_protect_secrets_makes_a_capture_a_container_wrote_0600(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    lay.capture.parent.mkdir(parents=True)
    lay.capture.write_bytes(b"x")
    os.chmod(lay.capture, 0o644)
    assert protect_secrets(tmp_path) == [lay.capture]
    assert _mode(lay.capture) == 0o600
