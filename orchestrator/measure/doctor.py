"""What works on this machine and what is missing, each with the fix."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.backends import docker
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _probe(name: str, fn: Callable[[], str], fix: str, required: bool = True) -> Check:
    try:
        return Check(name, True, fn(), "", required)
    except TestbedError as exc:
        return Check(name, False, exc.message, exc.hint or fix, required)


def _version_of(argv: list[str], pick: Callable[[str], str] = lambda s: s.splitlines()[0]) -> Callable[[], str]:
    def fn() -> str:
        if which(argv[0]) is None:
            raise TestbedError(f"{argv[0]} not found")
        proc = run(argv, timeout=20)
        return pick((proc.stdout or proc.stderr).strip())
    return fn


def _platformio() -> str:
    """Found the way `testbed firmware` finds it (on PATH or beside this Python), so doctor agrees with it."""
    from orchestrator.backends.platformio import find_pio

    return _version_of([find_pio(), "--version"])()


def _images() -> str:
    from orchestrator.backends.images import IMAGES, image_exists
    missing = [s.tag for s in IMAGES if not image_exists(s.tag)]
    if missing:
        raise TestbedError("not built: " + ", ".join(missing), hint="testbed images build")
    return "all built"


def _netem() -> str:
    from orchestrator.backends.impairment import netem_available

    if netem_available():
        return "sch_netem available"
    raise TestbedError("kernel lacks sch_netem: delay/jitter profiles unavailable (loss and rate still work)",
                       hint="on a kernel with the module: modprobe sch_netem")


def checks() -> list[Check]:
    py_ok = sys.version_info >= (3, 11)
    result = [Check("python", py_ok, sys.version.split()[0], "Python 3.11 or newer")]
    engine = _probe("docker engine", docker.engine_version, docker.ENGINE_HINT)
    result.append(engine)
    result.append(_probe("docker compose v2", docker.compose_version, docker.COMPOSE_HINT))
    if engine.ok:
        result.append(_probe("testbed images", _images, "testbed images build"))
    result.append(_probe("tshark (analysis)", _version_of(["tshark", "--version"]),
                         "apt-get install -y tshark"))
    result.append(_probe("debootstrap (offline base image)", _version_of(
        ["dpkg-query", "-W", "-f", "${Version}", "debootstrap"]), "apt-get install -y debootstrap",
        required=False))
    result.append(_probe("tc (impairment)", _version_of(["tc", "-V"]), "apt-get install -y iproute2",
                         required=False))
    result.append(_probe("nft (loss without netem)", _version_of(["nft", "--version"]),
                         "apt-get install -y nftables", required=False))
    result.append(_probe("netem (delay/jitter)", _netem, "load sch_netem (modprobe sch_netem)",
                         required=False))
    result.append(_probe("g++/cmake (virtual ESP32 host build)", _version_of(["cmake", "--version"]),
                         "apt-get install -y g++ cmake libmbedtls-dev", required=False))
    result.append(_probe("PlatformIO (real ESP32)", _platformio,
                         "pip install platformio (needs its registry to fetch the ESP32 toolchain)",
                         required=False))
    return result
