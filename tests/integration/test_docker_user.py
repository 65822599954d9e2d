"""As our users run it: an unprivileged user in the docker group, from a clone it owns, runs a sweep with
impairment. Every cell ok, every file of the bundle theirs (secrets 0600), the bundle deletable without
root, every helper container NET_ADMIN only. Ctrl-C (and SIGTERM) in an impaired cell as this user is a case of the
fault suite (tests/faults: sigterm, sigint-twice: nothing left, helpers and nft tables included, the resume ok)."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path

import pytest

from .conftest import Poller, helpers, only_bundle, owned
from .docker_user import DockerUser

IMPAIRED = ["--impairments", "none,lossy-1pct,narrowband-250kbit"]
SECRETS = ("*.key", "*.keys", "passwords.txt")


class HelperWatch(Poller):
    """Every helper container that exists while the block runs, inspected once (its HostConfig)."""

    every = 0.1

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, dict] = {}

    def poll(self) -> None:
        for cid in (i for i in helpers() if i not in self.seen):
            out = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, check=False)
            if out.returncode == 0:
                self.seen[cid] = json.loads(out.stdout)[0]


def _not_theirs(root: Path, uid: int) -> list[str]:
    return [str(p) for p in [root, *root.rglob("*")] if p.lstat().st_uid != uid]


def _assert_owned_and_deletable(user: DockerUser, bundle: Path) -> None:
    assert _not_theirs(bundle, user.uid) == []
    secrets = [p for pattern in SECRETS for p in bundle.rglob(pattern)]
    loose = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in secrets if stat.S_IMODE(p.stat().st_mode) != 0o600}
    assert loose == {}
    rm = user.run(["rm", "-r", str(bundle)])
    assert rm.returncode == 0, rm.stderr
    assert not bundle.exists()


def _assert_helpers_net_admin_only(seen: dict[str, dict]) -> None:
    for cid, c in seen.items():
        hc = c["HostConfig"]
        # `--cap-add NET_ADMIN`, which the engine records as CAP_NET_ADMIN
        assert [cap.removeprefix("CAP_") for cap in hc["CapAdd"]] == ["NET_ADMIN"], (cid, hc["CapAdd"])
        assert hc["CapDrop"] == ["ALL"], (cid, hc["CapDrop"])
        assert hc["Privileged"] is False
        assert hc["PidMode"] in ("", "private"), hc["PidMode"]
        assert hc["NetworkMode"].startswith("container:"), hc["NetworkMode"]
        assert not hc.get("Binds") and not c.get("Mounts"), (hc.get("Binds"), c.get("Mounts"))
        assert not hc.get("Devices") and hc.get("IpcMode") != "host" and hc.get("UsernsMode") != "host"


@pytest.fixture(scope="module")
def user_sweep(docker_user: DockerUser) -> tuple[Path, dict[str, dict], subprocess.CompletedProcess[str]]:
    out = docker_user.mkdir(docker_user.work / "results-acceptance")
    docker_user.testbed("down")
    with HelperWatch() as watch:
        proc = docker_user.testbed("sweep", "--payloads", "65", "--samples", "100", "--interval", "20ms",
                                   *IMPAIRED, "--out", str(out), timeout=900)
    return out, watch.seen, proc


def test_sweep_as_docker_user_every_cell_ok(docker_user: DockerUser, user_sweep) -> None:
    out, _seen, proc = user_sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bundle = only_bundle(out)
    manifest = json.loads((bundle / "manifest.json").read_text())
    cells = manifest["cells"]
    assert len(cells) == 6 and all(c["status"] == "ok" for c in cells.values()), cells
    lossy = json.loads((bundle / "runs" / "plain-65B-lossy-1pct-r1" / "impairment.json").read_text())
    assert lossy["applied"] and "testbed_impair {" not in lossy["after_clear"]
    helper = rf"docker exec testbed-{re.escape(docker_user.name)}-[0-9a-f]{{8}}-broker-1-netadmin nft"
    assert re.search(helper, lossy["after"])
    # the nft rule's own drop counter against the lost segments counted in the capture
    loss = json.loads((bundle / "runs" / "plain-65B-lossy-1pct-r1" / "metrics.json").read_text())["loss"]
    lost = loss["tcp_segments_lost_to_broker"]
    assert lossy["dropped_packets"] is not None and lost <= lossy["dropped_packets"] <= lost + 3, (lost, lossy)
    assert owned("container") == [] and owned("network") == []


def test_every_helper_container_has_net_admin_and_nothing_more(user_sweep) -> None:
    _out, seen, proc = user_sweep
    assert proc.returncode == 0
    # lossy-1pct: publisher (egress is not needed) ... each impaired cell starts at least one helper
    targets = {c["Config"]["Labels"]["io.testbed.helper"] for c in seen.values()}
    assert {"publisher-1", "broker-1"} <= {re.sub(r"^testbed-.+-[0-9a-f]{8}-", "", t) for t in targets}, targets
    assert len(seen) >= 4, list(seen)  # 2 impaired profiles x 2 scenarios, each with a fresh helper
    _assert_helpers_net_admin_only(seen)


def test_bundle_is_theirs_and_deletable_without_root(docker_user: DockerUser, user_sweep) -> None:
    out, _seen, proc = user_sweep
    assert proc.returncode == 0
    _assert_owned_and_deletable(docker_user, only_bundle(out))
