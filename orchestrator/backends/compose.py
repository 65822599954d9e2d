"""The docker compose project's lifecycle: one project name, one label, argv built by pure functions."""

from __future__ import annotations

import json
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backends.docker_engine import compose_command
from orchestrator.backends.process import run
from orchestrator.errors import TestbedError, ToolError
from orchestrator.paths import compose_file

PROJECT = "testbed"
OWNED_LABEL = "io.testbed.owned=true"
CORE_SERVICES = ("broker", "capture", "subscriber")


@dataclass(frozen=True)
class Topology:
    """Everything compose/testbed.yml's variables are filled from."""

    run_dir: Path
    port: int
    host_port: int
    bind: str = "127.0.0.1"
    subscriber_args: Sequence[str] = field(default_factory=list)
    publisher_args: Sequence[str] = field(default_factory=list)
    base_image: str = "debian:bookworm-slim"


def compose_env(t: Topology) -> dict[str, str]:
    return {
        "TESTBED_RUN_DIR": str(t.run_dir.resolve()),
        "TESTBED_PORT": str(t.port),
        "TESTBED_HOST_PORT": str(t.host_port),
        "TESTBED_BIND": t.bind,
        "TESTBED_SUBSCRIBER_ARGS": shlex.join(t.subscriber_args) or "--help",
        "TESTBED_PUBLISHER_ARGS": shlex.join(t.publisher_args),
        "TESTBED_BASE_IMAGE": t.base_image,
    }


# values that let compose parse the file when nothing is running (down, ps)
IDLE_ENV = {"TESTBED_RUN_DIR": "/nonexistent", "TESTBED_PORT": "1", "TESTBED_HOST_PORT": "1",
            "TESTBED_SUBSCRIBER_ARGS": "--help"}


def compose_argv(*args: str, compose: Sequence[str] | None = None, file: Path | None = None) -> list[str]:
    base = list(compose) if compose is not None else list(compose_command())
    return [*base, "-p", PROJECT, "-f", str(file or compose_file()), *args]


def up_argv(services: Sequence[str], *, wait: bool = True, timeout_s: int = 90,
            compose: Sequence[str] | None = None, file: Path | None = None) -> list[str]:
    args = ["up", "-d", "--no-build", "--pull", "never"]
    if wait:
        args += ["--wait", "--wait-timeout", str(timeout_s)]
    return compose_argv(*args, *services, compose=compose, file=file)


def down_argv(*, compose: Sequence[str] | None = None, file: Path | None = None) -> list[str]:
    return compose_argv("--profile", "publisher", "down", "--volumes", "--remove-orphans", "--timeout", "5",
                        compose=compose, file=file)


def check_port_free(bind: str, port: int) -> None:
    """Fail early, naming the port, when the host port we would publish is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, port))
        except OSError as exc:
            raise TestbedError(
                f"port {port} on {bind} is already in use ({exc.strerror})",
                hint=f"stop what listens there (`ss -ltnp 'sport = :{port}'`), run `testbed down` if it is an "
                     "old testbed, or choose another with --host-port") from exc


def up(t: Topology, services: Sequence[str] = CORE_SERVICES, timeout_s: int = 90) -> None:
    try:
        run(up_argv(services, timeout_s=timeout_s), env=compose_env(t), timeout=timeout_s + 30)
    except ToolError as exc:
        raise TestbedError(f"the testbed did not come up ({', '.join(services)})",
                           evidence=f"{exc.evidence or ''}\n--- container logs ---\n{logs(tail=30)}",
                           hint="`testbed status` shows the containers; `testbed down` cleans up") from exc


def logs(services: Sequence[str] = (), tail: int = 40) -> str:
    proc = run(compose_argv("logs", "--no-color", "--tail", str(tail), *services), env=IDLE_ENV, check=False,
               timeout=30)
    return (proc.stdout + proc.stderr).strip()


def ps() -> list[dict[str, object]]:
    """The project's containers (all states) as dicts from `compose ps --format json`."""
    proc = run(compose_argv("--profile", "publisher", "ps", "-a", "--format", "json"), env=IDLE_ENV,
               timeout=30)
    return parse_ps_json(proc.stdout)


def parse_ps_json(text: str) -> list[dict[str, object]]:
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def signal_service(service: str, signal: str) -> None:
    run(["docker", "kill", "--signal", signal, container_name(service)], timeout=30)


def wait_service_exit(service: str, timeout_s: float) -> int | None:
    """Wait until the service's container exits; its exit code, or None on timeout."""
    proc = run(["docker", "wait", container_name(service)], check=False, timeout=timeout_s + 5)
    out = proc.stdout.strip()
    return int(out) if out.lstrip("-").isdigit() else None


def container_name(service: str) -> str:
    return f"{PROJECT}-{service}-1"


def down() -> list[str]:
    """Remove every container, network and volume of the project; safe to run twice."""
    removed: list[str] = []
    run(down_argv(), env=IDLE_ENV, timeout=120)
    # leftovers compose no longer knows (a changed compose file, a crashed orchestrator)
    for kind, ls_args in (("container", ["ps", "-aq"]), ("network", ["network", "ls", "-q"]),
                          ("volume", ["volume", "ls", "-q"])):
        proc = run(["docker", *ls_args, "--filter", f"label={OWNED_LABEL}"], timeout=30)
        ids = proc.stdout.split()
        if ids:
            rm = ["docker", "rm", "-f", *ids] if kind == "container" else ["docker", kind, "rm", *ids]
            run(rm, timeout=60, check=False)
            removed += [f"{kind} {i}" for i in ids]
    return removed


def start_service(t: Topology, service: str) -> None:
    """Start one more service of the running project (the publisher) without touching the others."""
    run(compose_argv("--profile", service, "up", "-d", "--no-build", "--pull", "never", "--no-deps", service),
        env=compose_env(t), timeout=120)


def container_state(service: str) -> tuple[str, int | None]:
    """(status, exit code) of a service's container; ('missing', None) when there is none."""
    proc = run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", container_name(service)],
               check=False, timeout=30)
    if proc.returncode != 0:
        return "missing", None
    status, _, code = proc.stdout.strip().partition(" ")
    return status, int(code) if code.lstrip("-").isdigit() else None
