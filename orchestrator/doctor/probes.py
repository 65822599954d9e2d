"""The checks of `testbed doctor` that start throwaway containers. Each proves one thing a run needs, for
the user who runs doctor, and raises TestbedError naming what fails and the fix; what it returns is the
check's detail. The containers and their command lines are in ``orchestrator/backends/smoke.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.backends import docker, smoke
from orchestrator.backends.impairment import probe
from orchestrator.backends.impairment.argv import HELPER_IMAGE, NETEM_MODULE
from orchestrator.errors import TestbedError
from orchestrator.model.layout import Layout

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"  # a pcapng starts with its Section Header Block
REBUILD_CAPTURE = "testbed images build --rebuild capture"
NETEM_UNKNOWN = "qdisc kind is unknown"  # what tc says when the kernel lacks sch_netem


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def results_folder(out: Path) -> str:
    """``out`` exists afterwards (made when missing); a note when doctor made it."""
    if out.is_dir():
        return ""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TestbedError(f"cannot create the results folder {out}: {exc.strerror or exc}",
                           hint="run testbed where you may write, or pass --out DIR (a folder you own)") from exc
    return f"; made {out}"


def capture_writes_run_folder(out: Path) -> str:
    """A few-second capture by the capture image, as the user containers run as, into a throwaway folder
    (0700, yours) under ``out``: its file must be a pcapng that belongs to you. The folder is removed."""
    if docker.inspect_image(smoke.CAPTURE_IMAGE) is None:
        raise TestbedError(f"the capture image {smoke.CAPTURE_IMAGE} is not built", hint="testbed images build")
    note = results_folder(out)
    try:
        folder = Path(tempfile.mkdtemp(prefix="doctor-smoke-", dir=out)).resolve()
    except OSError as exc:
        raise TestbedError(f"you cannot write the results folder {out}: {exc.strerror or exc}",
                           hint=f"`sudo chown -R $USER {out}`, or pass --out DIR (a folder you own)") from exc
    try:
        detail = _smoke_in(folder, out)
    finally:
        left = _remove(folder)
    if left:
        raise TestbedError(f"{detail}, but doctor cannot remove its folder {folder}: {left}",
                           hint=f"remove it as its owner: `sudo rm -r {folder}`")
    return f"{detail}{note}"


def _remove(folder: Path) -> str:
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        return str(exc)
    return ""


def _smoke_in(folder: Path, out: Path) -> str:
    lay = Layout(folder)
    lay.capture.parent.mkdir()
    user = docker.container_user()
    said = smoke.smoke_capture(folder, user)
    if said.returncode != 0:
        raise capture_failure(said, user, folder)
    verdict = capture_file_verdict(lay.capture, user, os.getuid())
    return f"{smoke.SMOKE_SECONDS} s capture as {user} under {out}: {verdict}"


def _user_hint(user: str, folder: Path) -> str:
    if os.environ.get(docker.USER_ENV):
        return f"{docker.USER_ENV}={user} is set: give that uid:gid write access to {folder.parent}, or unset it"
    return (f"the run folder must be writable by uid:gid {user} inside the engine (an NFS mount with "
            "root_squash, SELinux without relabelling or a remote engine prevent it): pass --out DIR on a local disk")


def capture_failure(said: smoke.Said, user: str, folder: Path) -> TestbedError:
    """What a failed smoke capture means, from what docker and dumpcap said."""
    text = f"{said.stderr}\n{said.stdout}"
    lower = text.lower()
    if "could not be opened" in lower and "permission denied" in lower:
        return TestbedError(f"the capture (uid:gid {user}) cannot write the run folder {folder}",
                            hint=_user_hint(user, folder), evidence=text.strip())
    if "permission to capture" in lower or "operation not permitted" in lower:
        return TestbedError(f"the capture (uid:gid {user}) may not capture: dumpcap in {smoke.CAPTURE_IMAGE} "
                            f"lacks cap_net_raw ({_last_line(text)})",
                            hint=f"{REBUILD_CAPTURE} (its dumpcap gets the file capability cap_net_raw)",
                            evidence=text.strip())
    if "unable to find image" in lower or "no such image" in lower:
        return TestbedError(f"the capture image {smoke.CAPTURE_IMAGE} is not built", hint="testbed images build")
    return TestbedError(f"the smoke capture failed (exit {said.returncode}): {_last_line(text)}",
                        hint="try it by hand: " + " ".join(smoke.smoke_capture_argv(folder, user, "x")),
                        evidence=text.strip())


def capture_file_verdict(path: Path, user: str, me: int) -> str:
    """The capture file a run's analysis would read: present, a pcapng, and yours (uid ``me``)."""
    rel = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        raise TestbedError(f"the smoke capture (uid:gid {user}) exited 0 but wrote no {rel}", hint=REBUILD_CAPTURE)
    st = path.stat()
    if st.st_size == 0:
        raise TestbedError(f"the smoke capture (uid:gid {user}) wrote an empty {rel}", hint=REBUILD_CAPTURE)
    with path.open("rb") as f:
        head = f.read(4)
    if head != PCAPNG_MAGIC:
        raise TestbedError(f"the capture's {rel} is not a pcapng (it starts with {head.hex() or 'nothing'})",
                           hint=REBUILD_CAPTURE)
    if st.st_uid != me:
        hint = (f"unset {docker.USER_ENV} (it is {user})" if os.environ.get(docker.USER_ENV) else
                f"under rootless Docker containers must run as 0:0: set {docker.USER_ENV}=0:0")
        raise TestbedError(f"the capture's file belongs to uid {st.st_uid}, not you (uid {me}): you could not "
                           "delete your results", hint=hint)
    return f"{st.st_size} B pcapng, yours (uid {me})"


def helper_lists_qdiscs() -> str:
    """A throwaway impairment helper (NET_ADMIN only) runs tc and lists the qdiscs of its loopback."""
    probe.helper_ready()
    said = smoke.helper_qdiscs()
    lines = [ln.strip() for ln in said.stdout.splitlines() if ln.startswith("qdisc ")]
    if said.returncode != 0 or not lines:
        raise TestbedError(f"a helper container ({HELPER_IMAGE}) cannot list qdiscs (exit {said.returncode}): "
                           f"{_last_line(said.stderr or said.stdout)}",
                           hint="try it by hand: " + " ".join(smoke.helper_qdiscs_argv()))
    return f"tc in {HELPER_IMAGE}: {lines[0]}"


def netem() -> str:
    """A helper can add a netem qdisc (delay, jitter, correlated loss)."""
    ok, said = probe.netem_probe()
    if ok:
        return "a helper can add a netem qdisc"
    if NETEM_UNKNOWN in said.lower():
        raise TestbedError(f"kernel lacks {NETEM_MODULE}: --delay-mechanism netem unavailable; delay/jitter "
                           "profiles use the userspace delay line (auto, queue); loss and rate still work",
                           hint=f"on the engine's host: modprobe {NETEM_MODULE}")
    raise TestbedError(f"a helper cannot add a netem qdisc: {_last_line(said)}",
                       hint=f"on the engine's host: modprobe {NETEM_MODULE}")


def nft() -> str:
    """A helper can create an nftables table (loss without netem)."""
    ok, said = probe.nft_probe()
    if ok:
        return "a helper can create an nftables table"
    raise TestbedError(f"a helper cannot create an nftables table: {_last_line(said)}; loss-only profiles "
                       "(lossy-*) unavailable", hint="a kernel with nf_tables (CONFIG_NF_TABLES)")


QUEUE_DETAIL = "queue: userspace delay line ({why}); {floor}"


def delay_mechanism() -> str:
    """What ``--delay-mechanism auto`` makes delay and jitter with on the engine's kernel: the choice
    probe.resolve_mechanism makes (netem where a helper can add a netem qdisc, else the queue)."""
    probe.helper_ready()  # without a helper netem_available() is False: that is no answer, not "queue"
    if probe.netem_available():
        return f"netem ({NETEM_MODULE} available)"
    said = probe.netem_probe()[1]
    why = (f"kernel lacks {NETEM_MODULE}" if NETEM_UNKNOWN in said.lower()
           else f"a helper cannot add a netem qdisc: {_last_line(said)}")
    try:
        f = probe.line_floor()
        floor = (f"its floor here +{f['median_ms']:.3f} ms median, +{f['p99_ms']:.3f} ms p99 "
                 f"({f['received']} datagrams through it, measured now)")
    except TestbedError as exc:
        floor = exc.message
    return QUEUE_DETAIL.format(why=why, floor=floor)
