"""`make demo` / `make test` as an ordinary user: the ensure-* scripts install nothing, name the fix, stop when needed.

The scripts run as uid/gid 65534 with no supplementary groups (``setpriv``, so no user is created),
with a PATH whose first folder holds stubs: ``dpkg-query`` (every package installed except those
listed in the sandbox's ``missing`` file), ``apt-get`` (fails loudly: a user's run must never call it)
and ``docker`` (answers as the case needs). Switching uid needs root, as CI runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SETPRIV = shutil.which("setpriv")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or SETPRIV is None,
    reason="switching to uid 65534 needs root and setpriv (util-linux); CI runs as root",
)

DPKG_QUERY = """#!/bin/sh
# dpkg-query -W -f '${Status}' PKG: installed unless PKG is listed in ../missing
for pkg; do :; done
if grep -qx "$pkg" "$(dirname "$0")/../missing"; then
  echo "dpkg-query: no packages found matching $pkg" >&2; exit 1
fi
printf 'install ok installed'
"""
APT_GET = '#!/bin/sh\necho "apt-get must not run as a user: $*" >&2\nexit 99\n'
PERMISSION_DENIED = ("permission denied while trying to connect to the Docker daemon socket at "
                     "unix://{sock}: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.45/version\": dial unix {sock}: "
                     "connect: permission denied")
NOT_RUNNING = "Cannot connect to the Docker daemon at unix://{sock}. Is the docker daemon running?"


def readable_by_others(path: Path) -> bool:
    """Can uid 65534 (no group of ours) read ``path``: o+r on it, o+x on every folder above it?"""
    folders_ok = all(os.stat(p).st_mode & stat.S_IXOTH for p in path.parents)
    return folders_ok and bool(os.stat(path).st_mode & stat.S_IROTH)


class Sandbox:
    """A 0755 folder outside pytest's 0700 tmp_path: stubs in bin/, the scripts (copied if need be)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(mode=0o755)
        self.bin.chmod(0o755)
        self.socket = root / "docker.sock"  # named by the docker stub's errors; never created
        self.stub("dpkg-query", DPKG_QUERY)
        self.stub("apt-get", APT_GET)
        self.missing()
        self.scripts = REPO / "scripts"
        names = ("ensure-system.sh", "ensure-docker.sh")
        if not all(readable_by_others(self.scripts / n) for n in names):
            (root / "scripts").mkdir(mode=0o755)
            for name in names:
                shutil.copy(self.scripts / name, root / "scripts" / name)
                (root / "scripts" / name).chmod(0o755)
            self.scripts = root / "scripts"

    def stub(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    def missing(self, *packages: str) -> None:
        path = self.root / "missing"
        path.write_text("".join(f"{p}\n" for p in packages))
        path.chmod(0o644)

    def docker(self, version_exit: int, version_stderr: str = "") -> None:
        """A docker CLI whose `version` exits ``version_exit`` with that stderr; `compose version` works."""
        message = version_stderr.format(sock=self.socket).replace("'", "")
        self.stub("docker", f"""#!/bin/sh
case "$1" in
  version) [ {version_exit} -eq 0 ] && echo 27.0.0; [ -n '{message}' ] && echo '{message}' >&2; exit {version_exit} ;;
  compose) echo "Docker Compose version v2.29.0"; exit 0 ;;
esac
exit 1
""")

    def run_as_nobody(self, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        assert SETPRIV is not None
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.root), "LC_ALL": "C"}
        argv = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                "bash", str(self.scripts / script), *args]
        return subprocess.run(argv, env=env, cwd=self.root, capture_output=True, text=True, timeout=60,
                              check=False)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with tempfile.TemporaryDirectory(prefix="testbed-as-user-") as folder:
        root = Path(folder)
        root.chmod(0o755)
        yield Sandbox(root)


def test_the_stubs_run_as_uid_65534(sandbox: Sandbox) -> None:
    sandbox.missing("cmake")
    assert SETPRIV is not None
    argv = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", "sh", "-c",
            f"id -u; id -G; {sandbox.bin}/dpkg-query -W -f '${{Status}}' tshark; echo; "
            f"{sandbox.bin}/dpkg-query -W cmake || echo not-installed"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.stdout.split("\n") == ["65534", "65534", "install ok installed", "not-installed", ""]


def test_demo_as_a_user_passes_when_only_a_test_package_is_missing(sandbox: Sandbox) -> None:
    sandbox.missing("cmake", "libmbedtls-dev")
    proc = sandbox.run_as_nobody("ensure-system.sh", "demo")
    assert proc.returncode == 0, proc.stderr
    assert "only for `make test`" in proc.stderr
    assert "sudo apt-get install -y cmake libmbedtls-dev" in proc.stderr
    assert "must not run" not in proc.stderr


def test_demo_as_a_user_stops_without_tshark_and_prints_the_install_line(sandbox: Sandbox) -> None:
    sandbox.missing("tshark")
    proc = sandbox.run_as_nobody("ensure-system.sh", "demo")
    assert proc.returncode == 1
    assert "sudo apt-get install -y tshark\n" in proc.stderr
    assert "not root" in proc.stderr and "must not run" not in proc.stderr


def test_test_mode_as_a_user_stops_without_a_test_package(sandbox: Sandbox) -> None:
    sandbox.missing("cmake")
    proc = sandbox.run_as_nobody("ensure-system.sh", "test")
    assert proc.returncode == 1
    assert "`make test` needs host packages that are missing: cmake" in proc.stderr
    assert "sudo apt-get install -y cmake\n" in proc.stderr


def test_nothing_missing_is_silent_in_both_modes(sandbox: Sandbox) -> None:
    for mode in ("demo", "test"):
        proc = sandbox.run_as_nobody("ensure-system.sh", mode)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), mode


def test_docker_permission_denied_prints_the_docker_group_fix(sandbox: Sandbox) -> None:
    sandbox.docker(1, PERMISSION_DENIED)
    proc = sandbox.run_as_nobody("ensure-docker.sh", str(sandbox.root / "venv"))
    assert proc.returncode == 1
    assert "sudo usermod -aG docker nobody\n" in proc.stderr
    assert "newgrp docker" in proc.stderr
    assert "rootless Docker" in proc.stderr and "Docker Desktop" in proc.stderr
    assert f"may not use its socket {sandbox.socket}" in proc.stderr


def test_no_engine_says_how_to_start_one_and_not_the_group_fix(sandbox: Sandbox) -> None:
    sandbox.docker(1, NOT_RUNNING)
    proc = sandbox.run_as_nobody("ensure-docker.sh", str(sandbox.root / "venv"))
    assert proc.returncode == 1
    assert "no Docker engine answers: Cannot connect" in proc.stderr
    assert "systemctl --user start docker" in proc.stderr
    assert "usermod" not in proc.stderr and "must not run" not in proc.stderr


def test_an_engine_that_answers_is_fine_as_a_user(sandbox: Sandbox) -> None:
    sandbox.docker(0)
    proc = sandbox.run_as_nobody("ensure-docker.sh", str(sandbox.root / "venv"))
    assert (proc.returncode, proc.stderr) == (0, "")


def test_check_mode_needs_the_test_tools_but_not_the_images_or_the_docker_group_user(sandbox: Sandbox) -> None:
    sandbox.missing("debootstrap", "passwd", "python3-venv")
    proc = sandbox.run_as_nobody("ensure-system.sh", "check")
    assert proc.returncode == 0, proc.stderr
    assert "only for `make test`" in proc.stderr and "debootstrap passwd python3-venv" in proc.stderr
    sandbox.missing("cmake", "debootstrap")
    proc = sandbox.run_as_nobody("ensure-system.sh", "check")
    assert proc.returncode == 1
    assert "`make check` needs host packages that are missing: cmake\n" in proc.stderr
