"""`testbed doctor` as an unprivileged user in the docker group (tests/integration/docker_user.py): green when a
run works for that user, and with one precondition broken at a time it exits non-zero and names it: a run
folder the capture cannot write, the helper image missing, the docker socket refusing the user."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends.impairment.argv import HELPER_IMAGE
from orchestrator.backends.impairment.helpers import HELPER_LABEL
from orchestrator.doctor import checks as doctor

from .docker_user import DockerUser

BACKUP_TAG = HELPER_IMAGE.split(":")[0] + ":doctor-test-backup"


def _flat(text: str) -> str:
    """Without whitespace: the table wraps long cells over lines (at spaces, or inside long paths)."""
    return "".join(text.split())


def rows(table: str) -> dict[str, tuple[str, str, str]]:
    """doctor's table as {check: (status, detail, fix)}, each cell's wrapped lines joined."""
    found: list[list[str]] = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) != 4 or cells[0] == "check":
            continue
        if cells[1]:  # the status cell never wraps: a row starts where it is set
            found.append(cells)
        elif found:
            found[-1] = [f"{old} {new}".strip() for old, new in zip(found[-1], cells, strict=True)]
    return {name: (status, detail, fix) for name, status, detail, fix in found}


def row(proc: subprocess.CompletedProcess[str], name: str) -> tuple[str, str, str]:
    table = rows(proc.stdout)
    assert name in table, proc.stdout + proc.stderr
    return table[name]


def says(cell: str, text: str) -> bool:
    return _flat(text) in _flat(cell)


@pytest.fixture
def user_folder(docker_user: DockerUser) -> Iterator[Path]:
    """A results folder the user owns (0700) in its home, removed afterwards."""
    path = docker_user.mkdir(docker_user.home / f"doctor-test-{uuid.uuid4().hex[:8]}")
    path.chmod(0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_doctor_as_a_docker_group_user_is_green_and_proves_the_capture(docker_user: DockerUser) -> None:
    proc = docker_user.testbed("doctor", timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    status, detail, _fix = row(proc, doctor.CAPTURE_CHECK)
    assert status == "ok" and says(detail, f"capture as {docker_user.uid}:{docker_user.gid}"), output
    assert says(detail, f"pcapng, yours (uid {docker_user.uid})"), output
    assert row(proc, doctor.HELPER_CHECK)[0] == "ok", output
    assert says(row(proc, "docker engine")[1], f"containers run as {docker_user.uid}:{docker_user.gid}"), output
    assert not list((docker_user.clone / "results" / "runs").glob("doctor-smoke-*")), "doctor left its folder"
    assert "Traceback" not in output


def test_a_run_folder_the_capture_cannot_write_is_named(docker_user: DockerUser, user_folder: Path) -> None:
    proc = docker_user.testbed("doctor", "--out", str(user_folder), timeout=300,
                               env={"TESTBED_CONTAINER_USER": "65534:65534"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    status, detail, fix = row(proc, doctor.CAPTURE_CHECK)
    assert status == "MISSING", output
    assert says(detail, f"the capture (uid:gid 65534:65534) cannot write the run folder {user_folder}/doctor-smoke-")
    assert says(fix, f"give that uid:gid write access to {user_folder}"), output
    assert f"required check(s) failed: {doctor.CAPTURE_CHECK};" in proc.stderr
    assert list(user_folder.iterdir()) == [], "doctor left its folder"


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=60)


@pytest.fixture
def helper_image_untagged() -> Iterator[None]:
    """testbed-netadmin:latest gone for the test (the image itself is kept under a backup tag and tagged back)."""
    running = _docker("ps", "-q", "--filter", f"label={HELPER_LABEL}").stdout.split()
    assert running == [], f"impairment helpers are running ({running}): this test removes their image's tag"
    assert _docker("tag", HELPER_IMAGE, BACKUP_TAG).returncode == 0, f"{HELPER_IMAGE} must be built first"
    try:
        assert _docker("rmi", HELPER_IMAGE).returncode == 0
        yield
    finally:
        _docker("tag", BACKUP_TAG, HELPER_IMAGE)
        _docker("rmi", BACKUP_TAG)


def test_a_missing_helper_image_is_named(docker_user: DockerUser, helper_image_untagged: None) -> None:
    proc = docker_user.testbed("doctor", timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    status, detail, fix = row(proc, doctor.HELPER_CHECK)
    assert status == "optional" and says(detail, f"the impairment helper image {HELPER_IMAGE} is not built")
    assert fix == "testbed images build", output
    status, detail, _fix = row(proc, doctor.IMAGES_CHECK)
    assert status == "MISSING" and says(detail, f"not built: {HELPER_IMAGE}"), output
    assert row(proc, doctor.CAPTURE_CHECK)[0] == "ok", output
    assert all(row(proc, name)[0] == "skipped" for name in (doctor.NETEM_CHECK, doctor.NFT_CHECK)), output


def test_a_docker_socket_that_refuses_the_user_is_named_with_the_group_fix(docker_user: DockerUser) -> None:
    """The same user without its docker group, as in a login session started before `usermod -aG docker`."""
    argv = ["setpriv", f"--reuid={docker_user.uid}", f"--regid={docker_user.gid}", "--clear-groups", "--",
            docker_user.testbed_exe, "doctor"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=docker_user.env(),
                          cwd=docker_user.clone)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    status, detail, fix = row(proc, "docker engine")
    assert status == "MISSING", output
    assert says(detail, "permission denied on the Docker socket (unix:///var/run/docker.sock):"), output
    assert says(detail, "you were added to its group (docker), but this login session is not in it yet"), output
    assert says(fix, "sudo usermod -aG docker $USER") and says(fix, "newgrp docker"), output
    assert row(proc, doctor.CAPTURE_CHECK)[0] == "SKIPPED", output
    assert "required check(s) failed: docker engine," in proc.stderr and "Traceback" not in output
