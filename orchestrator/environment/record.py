"""What a bundle records about where it was measured: the source (git commit), the host, the tools and the images.

Everything recorded is observed: the host and its tools when the sweep started; a cell's images from its own
containers (``ran_images``: each container's image id, docker inspect's ``.Image``, taken before the teardown, and the
package versions read inside that very image). What our programs are written to do and no program reports is under
``configured``, never beside what was read.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestrator.backends import docker
from orchestrator.backends.docker import Container
from orchestrator.backends.impairment.helpers import HELPER_LABEL
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError
from orchestrator.paths import checkout

# read inside each image: the TLS libraries under whatever name the image's Debian gives them (libssl3 on 12, libssl3t64
# on 13; libmbedtls14/libmbedcrypto7 for 2.28, libmbedtls21/libmbedcrypto16 for 3.6; RabbitMQ's: Erlang/OTP's ssl,
# erlang-ssl, whose version is the OTP release's) and the programs that measure
PACKAGES = ("libssl3*", "libmbed*", "mosquitto", "libwebsockets*", "rabbitmq-server", "erlang-base", "erlang-ssl",
            "tshark", "python3", "iproute2")
DPKG_FORMAT = "${db:Status-Abbrev}\\t${Package}\\t${Version}\\n"
# what our clients are written to do, which none of them reports: configured, not observed
CONFIGURED = {"tcp_nodelay": "asked for in their code by the publisher (the device core, "
                             "firmware/platformio/lib/testbed_core/src/plain_tcp.cpp) and the subscriber "
                             "(orchestrator/clients/subscriber.py, which goes on if it is refused); not read "
                             "from their sockets"}


def git_commit() -> dict[str, Any]:
    try:
        root = checkout()
        if root is None:  # an installed package: its version names it
            return {"git_commit": None, "git_dirty": None}
        head = run(["git", "-C", str(root), "rev-parse", "HEAD"], check=False, timeout=10)
        dirty = run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], check=False,
                    timeout=10)
    except TestbedError:
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": head.stdout.strip() or None,
            "git_dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}


def host_info() -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kernel": platform.release(), "machine": platform.machine(), "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version(), "os": platform.platform()}


def first_line(argv: list[str]) -> str | None:
    """The first line a tool prints about itself (its version), None when it is missing or fails."""
    if which(argv[0]) is None:
        return None
    proc = run(argv, check=False, timeout=60)
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if proc.returncode == 0 and text else None


def tool_versions() -> dict[str, Any]:
    """This host's tools that measure (docker, compose, tshark), read now; the images are the cells' own
    (``ran_images``, gathered into the manifest by orchestrator/results/manifest.py)."""
    with ThreadPoolExecutor(max_workers=1) as pool:  # tshark's start beside the engine's two answers
        tshark = pool.submit(first_line, ["tshark", "--version"])
        return {"docker": docker.engine_version(), "compose": docker.compose_version(), "tshark": tshark.result(),
                "configured": dict(CONFIGURED)}


def environment() -> dict[str, Any]:
    """The manifest's "environment": the host and every tool's version."""
    return {"host": host_info(), **tool_versions()}


# ---------------------------------------------------------------- the images a cell ran
_versions_read: dict[str, dict[str, str]] = {}  # image id -> its packages: an id names one content, read once
_versions_lock = threading.Lock()


def dpkg_argv(image: str) -> list[str]:
    return docker.run_argv(image, "-W", "-f", DPKG_FORMAT, *PACKAGES,
                           options=["--network", "none", "--entrypoint", "dpkg-query"])


def parse_dpkg(text: str) -> dict[str, str]:
    """dpkg-query's lines -> {package: version} of the installed packages (a package removed but still known to
    dpkg is listed too, with another status than ``ii``)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].strip() == "ii" and parts[1]:
            found[parts[1]] = parts[2]
    return dict(sorted(found.items()))


def read_versions(image: str) -> dict[str, str] | None:
    """The packages of PACKAGES installed in ``image`` (an id), read inside it; None when it cannot be read."""
    try:
        proc = run(dpkg_argv(image), check=False, timeout=60)
    except TestbedError:
        return None
    # dpkg-query exits 1 when a pattern matches nothing (each image has some of PACKAGES); what it found is listed
    return parse_dpkg(proc.stdout) if proc.returncode in (0, 1) else None


def versions_of(images: Iterable[str]) -> dict[str, dict[str, str] | None]:
    """The versions inside each image id, the ones not read yet in this process read side by side (each read is
    mostly a container's start)."""
    wanted = sorted(set(images))
    with _versions_lock:
        todo = [i for i in wanted if i not in _versions_read]
    if todo:
        with ThreadPoolExecutor(max_workers=min(4, len(todo))) as pool:
            for image, found in zip(todo, pool.map(read_versions, todo), strict=True):
                if found is not None:  # a failed read is tried again by the next cell
                    with _versions_lock:
                        _versions_read[image] = found
    with _versions_lock:
        return {i: _versions_read.get(i) for i in wanted}


def role(c: Container, project: str) -> str:
    """What a container was to its cell: its compose service, or the impairment helper of one (the delay line runs
    in the router's)."""
    if c.service:
        return c.service
    target = c.labels.get(HELPER_LABEL)
    if target:
        return "helper of " + target.removeprefix(f"{project}-").removesuffix("-1")
    return c.name


def ran_images(containers: Sequence[Container], project: str) -> dict[str, dict[str, Any]]:
    """cell.json's ``images``: for each container of the cell, the image it ran (``id``: docker inspect's ``.Image``
    of the container, taken while it existed; ``image``: the tag it was created from) and the versions read inside
    that image."""
    ran = [c for c in containers if c.image_id]
    versions = versions_of(c.image_id for c in ran)
    out: dict[str, dict[str, Any]] = {}
    for c in ran:
        key = role(c, project)
        out[key if key not in out else c.name] = {"image": c.image, "id": c.image_id, "versions": versions[c.image_id]}
    return dict(sorted(out.items()))


def lab_environment() -> dict[str, Any]:
    """The manifest's "environment" for a sweep across hosts: this (controlling) host; the lab's hosts are in
    every cell's ``hosts``."""
    tool = Path(sys.executable).parent / "ansible-playbook"  # the one the driver runs (backends/impairment)
    ansible = str(tool) if tool.exists() else "ansible-playbook"
    return {"host": host_info(), "tshark": first_line(["tshark", "--version"]),
            "ansible": first_line([ansible, "--version"]),
            "where": "the controlling host; each lab host is described in its cells' hosts"}
