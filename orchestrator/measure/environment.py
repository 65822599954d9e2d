"""What a bundle records about where it was measured: the source (git commit), the host, the tools and images."""

from __future__ import annotations

import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestrator.backends import docker
from orchestrator.backends.images import image_digest, spec
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError
from orchestrator.lab.broker import BROKER
from orchestrator.paths import repo_root


def git_commit() -> dict[str, Any]:
    try:
        root = repo_root()
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
    """Versions of what measured: docker, compose, tshark, mosquitto, mbedTLS; image digests."""
    def in_image(image: str, package_glob: str) -> str | None:
        return first_line(docker.run_argv(image, "-W", "-f", "${Package} ${Version}\\n", package_glob,
                                          options=["--network", "none", "--entrypoint", "dpkg-query"]))

    # the three containers and tshark side by side: each is mostly the engine's or the program's start (0.55 s in a
    # row here, every sweep and run)
    with ThreadPoolExecutor(max_workers=4) as pool:
        tshark = pool.submit(first_line, ["tshark", "--version"])
        broker = pool.submit(in_image, spec(BROKER.service).tag, BROKER.name)
        mbedtls = pool.submit(in_image, spec("publisher").tag, "libmbedtls*")
        openssl = pool.submit(in_image, spec("broker").tag, "libssl3")
        return {
            "docker": docker.engine_version(),
            "compose": docker.compose_version(),
            "tshark": tshark.result(),
            BROKER.name: broker.result(),
            "mbedtls": mbedtls.result(),
            "openssl_broker": openssl.result(),
            "image_digests": {s: image_digest(spec(s).tag) for s in ("broker", "capture", "subscriber", "publisher")},
            "tcp_nodelay": "publisher (vdevice) and subscriber set TCP_NODELAY",
        }




def environment() -> dict[str, Any]:
    """The manifest's "environment": the host and every tool's version."""
    return {"host": host_info(), **tool_versions()}


def lab_environment() -> dict[str, Any]:
    """The manifest's "environment" for a sweep across hosts: this (controlling) host; the lab's hosts are in
    every cell's ``hosts``."""
    tool = Path(sys.executable).parent / "ansible-playbook"  # the one the driver runs (backends/impairment)
    ansible = str(tool) if tool.exists() else "ansible-playbook"
    return {"host": host_info(), "tshark": first_line(["tshark", "--version"]),
            "ansible": first_line([ansible, "--version"]),
            "where": "the controlling host; each lab host is described in its cells' hosts"}
