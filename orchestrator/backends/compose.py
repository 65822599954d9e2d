"""The docker compose project's lifecycle: this invocation's project, its labels, argv built by pure functions.

Every function acts on the current project (project()): this invocation's own, made on first use
(testbed-<user>-<8 hex>, orchestrator/backends/projects.py), or the user's `testbed up` session after
use_session(). Teardown removes that project's objects only, never another invocation's.
"""

from __future__ import annotations

import shlex
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from orchestrator.backends import docker, engine_lost, projects
from orchestrator.backends.docker import PROJECT_LABEL, Container, compose_command
from orchestrator.backends.process import run
from orchestrator.errors import TestbedError, ToolError
from orchestrator.paths import compose_file

OWNED_LABEL = "io.testbed.owned=true"
CORE_SERVICES = ("broker", "capture", "subscriber")
HEALTH_GATED = ("broker", "capture")  # their HEALTHCHECKs gate the others (compose/testbed.yml depends_on)
SERVICES = (*CORE_SERVICES, "publisher")  # every service of compose/testbed.yml run from our images
ROUTER = "router"  # the forwarding hop of the userspace delay line (image testbed-netadmin)
TIME_ECHO = "timeecho"  # the lab clock a board syncs with (--publisher esp32)
TIME_ECHO_PORT = 9123
_current: list[str] = []  # this process's project, once chosen


def project() -> str:
    """The compose project this process works on: its own (made on first use) or the session's."""
    if not _current:
        _current.append(projects.new_name())
    return _current[0]


def use_project(name: str) -> str:
    _current[:] = [name]
    return name


def use_session() -> str:
    """Work on the user's `testbed up` session project (up, status, down)."""
    return use_project(projects.session_name())


class KeptServices(Protocol):
    """Services whose containers outlive a cell (a sweep block's clients, backends/kept_clients.py): start_service
    starts the cell's program in its container instead of a container."""

    def holds(self, service: str) -> bool: ...
    def start(self, t: Topology, service: str) -> None: ...
    def wait_exit(self, service: str, timeout_s: float) -> int | None: ...  # the program's exit code
    def stop(self, service: str, grace_s: float = 3.0) -> int | None: ...  # SIGTERM, then SIGKILL
    def log_tail(self, service: str, lines: int = 20) -> str: ...  # the program's last lines


@dataclass(frozen=True)
class Topology:
    """Everything compose/testbed.yml's variables are filled from."""

    run_dir: Path
    port: int
    host_port: int
    bind: str = "127.0.0.1"
    subscriber_args: Sequence[str] = field(default_factory=list)
    publisher_args: Sequence[str] = field(default_factory=list)
    publisher_image: str = "testbed-publisher:latest"  # the device stack's (publishers/virtual.py)
    broker_image: str = "testbed-broker:latest"  # the cell's broker build's (lab/topology.py, model/brokers.py)
    base_image: str = "debian:bookworm-slim"
    user: str = "0:0"  # uid:gid the containers run as (docker.container_user())
    publisher_network: str = "lab"  # "uplink": behind the router (the delay line's forwarding hop)
    nofile: int = 16384  # the broker's and the publisher's open-file limit (compose ulimits)
    kept: KeptServices | None = None  # a kept-up lab's clients: their programs started per cell, not containers


def compose_env(t: Topology) -> dict[str, str]:
    return {
        "TESTBED_RUN_DIR": str(t.run_dir.resolve()),
        "TESTBED_PORT": str(t.port),
        "TESTBED_HOST_PORT": str(t.host_port),
        "TESTBED_BIND": t.bind,
        "TESTBED_SUBSCRIBER_ARGS": shlex.join(t.subscriber_args) or "--help",
        "TESTBED_PUBLISHER_ARGS": shlex.join(t.publisher_args),
        "TESTBED_PUBLISHER_IMAGE": t.publisher_image,
        "TESTBED_BROKER_IMAGE": t.broker_image,
        "TESTBED_BASE_IMAGE": t.base_image,
        "TESTBED_USER": t.user,
        "TESTBED_PUBLISHER_NETWORK": t.publisher_network,
        "TESTBED_NOFILE": str(t.nofile),
        "TESTBED_OWNER": projects.owner_slug(),
    }


# values that let compose parse the file when nothing is running (down, ps)
IDLE_ENV = {"TESTBED_RUN_DIR": "/nonexistent", "TESTBED_PORT": "1", "TESTBED_HOST_PORT": "1",
            "TESTBED_SUBSCRIBER_ARGS": "--help"}


def compose_argv(*args: str, compose: Sequence[str] | None = None, file: Path | None = None,
                 name: str | None = None) -> list[str]:
    base = list(compose) if compose is not None else list(compose_command())
    return [*base, "-p", name or project(), "-f", str(file or compose_file()), *args]


def up_argv(services: Sequence[str], *, start: bool = True, deps: bool = True, compose: Sequence[str] | None = None,
            file: Path | None = None) -> list[str]:
    """Start ``services`` (or only create them), and what they depend on unless not ``deps``, never building or
    pulling; up() waits for them itself."""
    args = ["up", "-d" if start else "--no-start", "--no-build", "--pull", "never", *([] if deps else ["--no-deps"])]
    return compose_argv(*args, *services, compose=compose, file=file)


def down_argv(*, compose: Sequence[str] | None = None, file: Path | None = None, name: str | None = None) -> list[str]:
    return compose_argv("--profile", "publisher", "down", "--volumes", "--remove-orphans", "--timeout", "5",
                        compose=compose, file=file, name=name)


def check_port_free(bind: str, port: int) -> None:
    """Fail early, naming the port, when the host port we would publish is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, port))
        except OSError as exc:
            holder = port_holder(port)
            if holder:
                raise TestbedError(f"port {port} on {bind} is published by {holder}",
                                   hint="wait for it to end or choose another port with --host-port; your own "
                                        "leftovers go with `testbed down`") from exc
            raise TestbedError(
                f"port {port} on {bind} is already in use ({exc.strerror})",
                hint=f"stop what listens there (`ss -ltnp 'sport = :{port}'`), run `testbed down` if it is an "
                     "old testbed, or choose another with --host-port") from exc


def port_holder(port: int) -> str | None:
    """"testbed project P of user U" when one of our containers publishes ``port``."""
    for c in docker.labelled_containers(OWNED_LABEL, publish=port):
        live = projects.holder(c.labels.get(PROJECT_LABEL, ""))
        return (f"testbed project {c.labels.get(PROJECT_LABEL, '?')} of user "
                f"{c.labels.get(projects.OWNER_LABEL) or '?'}" + (f": {live}" if live else ""))
    return None


def free_port(bind: str) -> int:
    """A port nothing listens on now, chosen by the kernel among the ephemeral ones."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((bind, 0))
        return int(s.getsockname()[1])


def with_host_port(t: Topology, *, fixed: bool) -> Topology:
    """``t`` with the host port it will publish: its own when ``fixed`` (asked for, or a board's or `up`'s,
    which clients are told), refused by name when taken; else a free one, so that invocations side by side
    never race for the scenario's port."""
    if fixed:
        check_port_free(t.bind, t.host_port)
        return t
    return replace(t, host_port=free_port(t.bind))


def up(t: Topology, services: Sequence[str] = CORE_SERVICES, timeout_s: int = 90,
       meanwhile: Callable[[], None] | None = None) -> None:
    """Start ``services`` and wait for them; TestbedError naming the service that failed first.

    The services others wait for (HEALTH_GATED: their images' HEALTHCHECKs) start first and are watched until
    healthy; then the others start. compose's own --wait looks every 0.5 s, twice here (for the others' depends_on
    and at the end): 1.6 s for an up that is ready after 0.9 s. compose's exit code alone is not trusted: some
    compose v2 releases exit 0 after printing "dependency failed to start", so every service must also be running
    afterwards. ``meanwhile`` runs in a thread while the gated services become healthy (their containers and
    networks exist then), and has ended when this returns or raises: a kept-up lab makes its clients' containers
    there (lab/keptlab.py).
    """
    projects.claim(project())  # before any container exists: `testbed down` can tell live from crashed
    gated = [s for s in services if s in HEALTH_GATED]
    others = [s for s in services if s not in HEALTH_GATED]
    env = compose_env(t)
    try:
        healthy = True
        if gated:
            run(up_argv(gated), env=env, timeout=timeout_s + 30)
            with _beside(meanwhile):
                healthy = wait_healthy(gated, timeout_s)
        elif meanwhile is not None:
            meanwhile()
        if others:  # created but not started when a gated one failed: its state is evidence, as compose left it
            run(up_argv(others, start=healthy, deps=False), env=env, timeout=timeout_s + 30)
        compose_error: ToolError | None = None
    except ToolError as exc:
        compose_error = exc
    by_service = {c.service: c for c in containers()}
    idle = [f"{s}: {_state(by_service.get(s))}" for s in services if s not in by_service or not _ready(by_service[s])]
    if compose_error is None and not idle:
        return
    raise service_failure("the testbed did not come up", detail=", ".join(idle) or ", ".join(services),
                          tool_evidence=compose_error.evidence if compose_error else None,
                          hint="each container's log and state are kept in logs/ (<service>.log, containers.json) "
                               "of the run or session folder")


@contextmanager
def _beside(work: Callable[[], None] | None) -> Iterator[None]:
    """``work`` in a thread while the block runs; joined afterwards, also when the block raises (Ctrl-C). What
    ``work`` raised is raised then, unless the block raised first."""
    if work is None:
        yield
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="up-meanwhile") as pool:
        done = pool.submit(work)
        yield
    done.result()


def _ready(c: Container) -> bool:
    """Running, and healthy when its image has a health check (as compose's --wait has it)."""
    return c.state.running and (c.state.health is None or c.state.health.status == "healthy")


def _state(c: Container | None) -> str:
    if c is None:
        return "missing"
    health = c.state.health
    return c.state.status + (f", health {health.status}" if c.state.running and health is not None else "")


def wait_healthy(services: Sequence[str], timeout_s: float) -> bool:
    """Whether every one of ``services`` is ready (looked at every 50 ms), before one stops or fails its health
    check, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = {c.service: c for c in containers() if c.service in services}
        if all(s in found and _ready(found[s]) for s in services):
            return True
        if any(s not in found or not found[s].state.running or docker.failure_of(found[s]) for s in services) \
                or time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def containers(name: str | None = None) -> list[Container]:
    """The project's containers (all states), typed, sorted by service."""
    return docker.project_containers(name or project())


def service_failure(headline: str, *, detail: str | None = None, tool_evidence: str | None = None,
                    hint: str | None = None) -> TestbedError:
    """"<headline>: <service> failed first (<what>)", with that service's last log lines as evidence."""
    failure = docker.first_failure(containers())
    if failure is not None:
        message = f"{headline}: {failure.first()}"
        log = logs([failure.service], tail=30)
    else:
        message = f"{headline} ({detail})" if detail else headline
        log = logs(tail=30)
    evidence = "\n".join(part for part in (tool_evidence, f"--- container logs ---\n{log}") if part)
    return TestbedError(message, evidence=evidence, hint=hint)


def logs(services: Sequence[str] = (), tail: int = 40) -> str:
    proc = run(compose_argv("logs", "--no-color", "--tail", str(tail), *services), env=IDLE_ENV, check=False,
               timeout=30)
    return (proc.stdout + proc.stderr).strip()


def container_name(service: str) -> str:
    return f"{project()}-{service}-1"


def network_name(network: str) -> str:
    """A network of compose/testbed.yml (lab, uplink) as the engine names it for this project."""
    return f"{project()}_{network}"


def down(name: str | None = None) -> list[str]:
    """Remove every container, network and volume of the project (this process's, or ``name``) and its
    impairment helpers, then its lock; safe to run twice. Another project's objects are never touched."""
    name = name or project()

    def remove() -> list[str]:
        run(down_argv(name=name), env=IDLE_ENV, timeout=120)
        # leftovers compose no longer knows (a changed compose file, helpers, a crashed orchestrator)
        return docker.remove_labelled(f"{PROJECT_LABEL}={name}") + docker.remove_labelled(
            f"{projects.PROJECT_LABEL}={name}")

    removed = engine_lost.once_the_engine_answers(remove)  # a dockerd being restarted is waited for, bounded
    # this process keeps its own lock to the end (a sweep's next cell reuses the project: a `testbed down`
    # elsewhere between two cells must still see it live); a crashed invocation's lock file goes now
    projects.forget(name)
    return removed


def mine() -> dict[str, list[Container]]:
    """This user's testbed projects that have containers (any state), by project."""
    found: dict[str, list[Container]] = {}
    for c in docker.labelled_containers(f"{projects.OWNER_LABEL}={projects.owner_slug()}"):
        found.setdefault(c.labels.get(PROJECT_LABEL) or c.labels.get(projects.PROJECT_LABEL, "?"), []).append(c)
    return found


def reap() -> tuple[list[str], list[str]]:
    """Remove what crashed invocations of this user left (their lock is free), leaving live ones alone:
    (lines saying what was removed, lines naming the live invocations left running)."""
    removed, live = [], []
    found = mine()
    for name in sorted(set(found) | set(projects.locked_projects())):
        if name == project():
            continue
        holder = projects.holder(name)
        if holder is not None:
            live.append(f"left running: {holder}")
            continue
        left = [c.name for c in found.get(name, [])]
        down(name)
        if left:
            removed.append(f"removed the leftover containers of ended invocation {name}: {', '.join(left)}")
    return removed, live


def start_service(t: Topology, service: str) -> None:
    """Start one more service of the running project (the publisher) without touching the others; a service the
    topology keeps up (``t.kept``) gets a new program in its container instead."""
    if t.kept is not None and t.kept.holds(service):
        t.kept.start(t, service)
        return
    projects.claim(project())
    run(compose_argv("--profile", service, "up", "-d", "--no-build", "--pull", "never", "--no-deps", service),
        env=compose_env(t), timeout=120)
