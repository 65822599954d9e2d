"""What works on this machine for the user who runs doctor, and what is missing, each with the fix.

Checks that matter to a run PROVE it (probes.py): a smoke capture by the capture image into a
throwaway folder under the results folder, a helper container listing qdiscs. A check that needs what
failed before it (the engine, the helper) is skipped with the reason, and counts as failed
when it is required: doctor is green exactly when every required check passed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends import docker, install_hint
from orchestrator.backends.process import run, which
from orchestrator.doctor import probes
from orchestrator.errors import TestbedError
from orchestrator.model.layout import RUNS

RESULTS = Path("results") / RUNS  # where `testbed run` writes its run folders by default


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True
    skipped: bool = False  # not run: what it needs failed (ok is False)


def skip(name: str, why: str, fix: str = "", required: bool = True) -> Check:
    return Check(name, False, f"not checked: {why}", fix, required, skipped=True)


def failed_required(results: Sequence[Check]) -> list[Check]:
    """The required checks that failed or could not run: doctor exits non-zero when there is one."""
    return [c for c in results if c.required and not c.ok]


def _probe(name: str, fn: Callable[[], str], fix: str, required: bool = True) -> Check:
    """``fn``'s detail, or its failure as a failed check: doctor reports, it never ends in a traceback."""
    try:
        return Check(name, True, fn(), "", required)
    except TestbedError as exc:
        return Check(name, False, exc.message, exc.hint or fix, required)
    except OSError as exc:
        return Check(name, False, str(exc), fix, required)
    except Exception as exc:  # noqa: BLE001 - reported as a failed check with its type, never hidden
        return Check(name, False, f"unexpected {type(exc).__name__}: {exc}", fix, required)


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
    from orchestrator.backends.images import built_by_default, image_exists

    wanted = built_by_default()  # an image built on demand is built by the run that needs it
    missing = [s.tag for s in wanted if not image_exists(s.tag)]
    if missing:
        raise TestbedError("not built: " + ", ".join(missing), hint="testbed images build")
    return "all built: " + ", ".join(s.name for s in wanted)


def _engine() -> str:
    """The engine's version and kind, and the uid:gid every container of a run runs as."""
    version = docker.engine_version()
    kind = "rootless" if docker.engine_is_rootless() else "rootful"
    how = f" (from {docker.USER_ENV})" if os.environ.get(docker.USER_ENV) else ""
    return f"{version}, {kind}; containers run as {docker.container_user()}{how}"


def _host_tools() -> str:
    """tc, nft and nsenter on this host: only a lab inventory that impairs this host's namespaces needs them."""
    found = {p: which(p) for p in ("tc", "nft", "nsenter")}
    missing = [p for p, path in found.items() if path is None]
    if missing:
        raise TestbedError(f"not found: {', '.join(missing)} (containers need none of them)")
    return ", ".join(str(path) for path in found.values())


IMAGES_CHECK = "testbed images"
CAPTURE_CHECK = "capture can write a run folder"
HELPER_CHECK = "impairment helper lists qdiscs"
NETEM_CHECK = "netem (delay/jitter), in a helper"
NFT_CHECK = "nft (loss without netem), in a helper"
DELAY_CHECK = "delay mechanism (auto)"
NEEDS_HELPER = (NETEM_CHECK, NFT_CHECK, DELAY_CHECK)
# what needs the engine, and whether `testbed run` (default impairment: none) needs it
NEEDS_ENGINE = ((IMAGES_CHECK, True), (CAPTURE_CHECK, True), (HELPER_CHECK, False),
                *((name, False) for name in NEEDS_HELPER))


def _container_checks(engine: Check, out: Path) -> list[Check]:
    """The images, the smoke capture, the helper and what a helper can do on the engine's kernel."""
    if not engine.ok:
        return [skip(name, "needs the docker engine (its row says why)", required=req) for name, req in NEEDS_ENGINE]
    result = [_probe(IMAGES_CHECK, _images, "testbed images build"),
              _probe(CAPTURE_CHECK, lambda: probes.capture_writes_run_folder(out), ""),
              _probe(HELPER_CHECK, probes.helper_lists_qdiscs, "", required=False)]
    if not result[-1].ok:
        return result + [skip(name, "needs a working impairment helper", required=False) for name in NEEDS_HELPER]
    return result + [
        _probe(NETEM_CHECK, probes.netem, "modprobe sch_netem (on the engine's host)", required=False),
        _probe(NFT_CHECK, probes.nft, "a kernel with nf_tables", required=False),
        _probe(DELAY_CHECK, probes.delay_mechanism, "", required=False)]


def _host_checks(m: install_hint.Machine) -> list[Check]:
    return [
        _probe("tshark (analysis)", _version_of(["tshark", "--version"]), install_hint.packages(m, "tshark")),
        _probe("debootstrap (offline base image)", _version_of(
            ["dpkg-query", "-W", "-f", "${Version}", "debootstrap"]), install_hint.packages(m, "debootstrap"),
            required=False),
        _probe("tc, nft, nsenter on this host (lab inventory only)", _host_tools,
               install_hint.packages(m, "iproute2", "nftables", "util-linux"), required=False),
        _probe("g++/cmake (virtual ESP32 host build)", _version_of(["cmake", "--version"]),
               install_hint.packages(m, "g++", "cmake", "libmbedtls-dev"), required=False),
        _probe("PlatformIO (real ESP32)", _platformio,
               "pip install platformio (needs its registry to fetch the ESP32 toolchain)", required=False),
    ]


def checks(out: Path | None = None) -> list[Check]:
    """Every check, in the order doctor shows them; ``out``: where run folders are written (default
    results/runs), which the smoke capture proves the capture container can write."""
    py_ok = sys.version_info >= (3, 11)
    result = [Check("python", py_ok, sys.version.split()[0], "Python 3.11 or newer")]
    machine = install_hint.this_machine()
    engine = _probe("docker engine", _engine, "start Docker Desktop" if machine.desktop else docker.ENGINE_HINT)
    result += [engine, _probe("docker compose v2", docker.compose_version, install_hint.compose(machine))]
    return result + _container_checks(engine, RESULTS if out is None else out) + _host_checks(machine)
