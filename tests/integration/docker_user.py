"""An unprivileged user in the docker group, with a clone of this checkout it owns and its own venv.

CI runs as root, but our users do not: tests that matter to them run the CLI as this user (not root,
no /usr/sbin on PATH, its own Python from the system's python3). The user's venv installs from a
wheelhouse built by root from this venv's packages, kept in /var/cache/testbed (a cache between runs on
the same machine; rebuilt when missing or when the package list changes). The user's venv is kept between runs
too, when it was made from the same system Python, package list and pyproject.toml (its stamp) and still holds
exactly that package list (pip freeze): recreating it cost a run about 40 s per user here (deleting the old one's
12,800 files and installing them again), twice (the second user of test_concurrent_users.py). The clone is new
each time and the venv's editable install of it is redone.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# make test runs the docker tests in two lanes at once (tests/conftest.py SECOND_LANE): each lane has its own user,
# named by TESTBED_TEST_USER (the second lane's testbed-userb), and the "nothing left" checks look only at what
# their lane's users and root made (tests/integration/conftest.py owned)
NAME = os.environ.get("TESTBED_TEST_USER") or "testbed-user"
LANE_USERS = ("testbed-user", "testbed-userb")
CACHE = Path("/var/cache/testbed")
USER_PATH = "/usr/local/bin:/usr/bin:/bin"  # an ordinary Debian user's PATH: no sbin folders
KEPT_VENV = ".testbed-venv-kept"  # in the user's home while its clone is made again
VENV_STAMP = ".testbed-user-venv"  # in the venv: the key it was made for (venv_key)
SKIP_IN_USER_VENV = ("mypy", "ruff", "platformio", "pytest", "types-", "pyshark", "lxml", "librt",
                     "ast_serialize", "iniconfig", "pluggy")


def sh(*argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


@dataclass(frozen=True)
class DockerUser:
    name: str
    uid: int
    gid: int
    home: Path
    clone: Path
    work: Path  # emptied when the fixture starts: the tests' output folders go here

    @property
    def testbed_exe(self) -> str:
        return str(self.clone / ".venv" / "bin" / "testbed")

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "PATH": USER_PATH,
               "LANG": "C.UTF-8", "TERM": "dumb", "COLUMNS": "200"}
        env.update(extra or {})
        return env

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as this user, with its groups (docker) from /etc/group."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]

    def run(self, argv: Sequence[str], *, timeout: float = 600, env: Mapping[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.env(env), cwd=cwd or self.clone)

    def testbed(self, *args: str, timeout: float = 600,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run([self.testbed_exe, *args], timeout=timeout, env=env)

    def popen(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv([self.testbed_exe, *args]), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env(env), cwd=self.clone)

    def mkdir(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        return path


def ensure_account(name: str = NAME) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        sh("useradd", "--create-home", "--shell", "/bin/bash", "--groups", "docker", name)
        return pwd.getpwnam(name)


def make_clone(dest: Path, uid: int, gid: int) -> None:
    """A git clone of this checkout, plus what the working tree changed (a developer's uncommitted
    edits; none in CI), owned by the user. The old clone's .venv is moved aside and back (make_venv decides
    whether it can serve again)."""
    kept = dest.parent / KEPT_VENV
    shutil.rmtree(kept, ignore_errors=True)
    if (dest / ".venv").is_dir() and not (dest / ".venv").is_symlink():
        (dest / ".venv").rename(kept)
    if dest.exists():
        shutil.rmtree(dest)
    sh("git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(dest))
    # against HEAD, so staged edits and staged new files come too (ls-files --modified sees only the unstaged ones)
    git = ("git", "-C", str(REPO))
    changed = sh(*git, "diff", "--name-only", "--no-renames", "--diff-filter=d", "-z", "HEAD").stdout \
        + sh(*git, "ls-files", "--others", "--exclude-standard", "-z").stdout
    for rel in filter(None, changed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    deleted = sh(*git, "diff", "--name-only", "--no-renames", "--diff-filter=D", "-z", "HEAD").stdout
    for rel in filter(None, deleted.split("\0")):
        (dest / rel).unlink(missing_ok=True)
    sh("chown", "-R", f"{uid}:{gid}", str(dest))
    if kept.is_dir():
        kept.rename(dest / ".venv")


def wheelhouse() -> tuple[Path, Path]:
    """(wheelhouse, requirements) readable by everyone: this venv's packages, less the dev tools."""
    frozen = sh(sys.executable, "-m", "pip", "freeze", "--exclude-editable").stdout.splitlines()
    req = sorted(line for line in frozen if line and not line.lower().startswith(SKIP_IN_USER_VENV))
    digest = hashlib.sha256("\n".join(req).encode()).hexdigest()[:12]
    wh = CACHE / f"user-wheelhouse-{digest}"
    req_file = wh / "requirements.txt"
    if not (wh / ".complete").exists():
        wh.mkdir(parents=True, exist_ok=True)
        req_file.write_text("\n".join(req) + "\n")
        pip = [sys.executable, "-m", "pip"]
        sh(*pip, "wheel", "-q", "-r", str(req_file), "-w", str(wh), timeout=900)
        sh(*pip, "download", "-q", "--only-binary=:all:", "-d", str(wh), "setuptools>=77", "wheel", timeout=300)
        (wh / ".complete").touch()
    sh("chmod", "-R", "a+rX", str(CACHE))
    return wh, req_file


def venv_key(python: str, req: Path) -> str:
    """What the user's venv is made from: the system Python (its version), the package list, pyproject.toml."""
    version = sh(python, "-c", "import sys; print(sys.version)").stdout
    parts = (version, req.read_text(), (REPO / "pyproject.toml").read_text())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def venv_reusable(user: DockerUser, key: str, req: Path) -> bool:
    """The venv the user has was made for ``key`` and holds exactly the package list (nothing added, removed or
    changed since)."""
    venv = user.clone / ".venv"
    stamp = venv / VENV_STAMP
    if not stamp.is_file() or stamp.read_text().strip() != key or not (venv / "bin" / "pip").exists():
        return False
    freeze = user.run([str(venv / "bin" / "pip"), "freeze", "--exclude-editable"], timeout=300)
    wanted = sorted(line.lower() for line in req.read_text().splitlines() if line.strip())
    return freeze.returncode == 0 and sorted(line.lower() for line in freeze.stdout.splitlines() if line) == wanted


def make_venv(user: DockerUser) -> None:
    """The user's own venv, from the system's python3, installed from the wheelhouse (no index), or the one it has
    when venv_reusable; the editable install of the clone is made either way. --no-compile: byte-compiling every
    installed module took 25 of 57 s here; Python compiles what the user's runs import on first use instead (into
    the venv, which the user owns)."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        raise RuntimeError("no system python3 for the unprivileged user (apt-get install python3-venv)")
    wh, req = wheelhouse()
    venv = user.clone / ".venv"
    key = venv_key(python, req)
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "--no-index", "--find-links", str(wh)]
    steps = [[*pip, "--no-deps", "-e", str(user.clone)]]
    if not venv_reusable(user, key, req):
        shutil.rmtree(venv, ignore_errors=True)
        steps = [[python, "-m", "venv", str(venv)], [*pip, "-U", "setuptools", "wheel"], [*pip, "-r", str(req)],
                 *steps]
    for step in steps:
        proc = user.run(step, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"user venv: {' '.join(step)} failed:\n{proc.stdout}\n{proc.stderr}")
    user.run(["sh", "-c", f"echo {key} > {venv / VENV_STAMP}"])


def create(name: str = NAME) -> DockerUser:
    """The user, its clone and its venv (the account is reused when it exists)."""
    account = ensure_account(name)
    home = Path(account.pw_dir)
    user = DockerUser(name, account.pw_uid, account.pw_gid, home, home / "testbed", home / "work")
    shutil.rmtree(user.work, ignore_errors=True)
    user.mkdir(user.work)
    make_clone(user.clone, user.uid, user.gid)
    make_venv(user)
    return user
