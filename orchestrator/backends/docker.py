"""The Docker engine, typed: the one module that talks to it (compose.py drives the compose CLI).

State comes from the docker CLI's `docker inspect` JSON (through process.run), parsed into pydantic
models: the CLI resolves the user's engine itself (DOCKER_HOST, `docker context`), failures carry argv
and stderr, and the JSON is the engine API's own, so tests parse recorded samples. The SDK is used for
one thing the CLI cannot give: the raw stats stream (cumulative CPU nanoseconds, docker_stats.py), through
the endpoint docker_endpoint.py resolves. Every docker command line starts in the argv builders here, one per
docker noun (``exec_argv``, ``run_argv``, ...); tests/unit/test_axes_docker_argv.py finds any built elsewhere.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.backends import install_hint
from orchestrator.backends.compose_exe import candidates as _compose_candidates
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError, ToolError
from orchestrator.waiting import poll

ENGINE_HINT = ("start the Docker engine (on Debian as root: `make docker` or `apt-get install -y docker.io && "
               "setsid dockerd >/var/log/dockerd.log 2>&1 &`)")
SERVICE_LABEL = "com.docker.compose.service"
PROJECT_LABEL = "com.docker.compose.project"
DEFAULT_HOST = "unix:///var/run/docker.sock"


# ----------------------------------------------------------------------------- command lines, one per noun

def argv(*words: str) -> list[str]:
    """``docker WORDS...``: where every docker command line starts (the engine's own queries use it as is)."""
    return ["docker", *words]


def exec_argv(container: str, *command: str, detach: bool = False, stdin: bool = False) -> list[str]:
    """``docker exec [-d] [-i] CONTAINER COMMAND...``: a command in a running container."""
    return argv("exec", *(["-d"] if detach else []), *(["-i"] if stdin else []), container, *command)


def run_argv(image: str, *command: str, options: Sequence[str] = (), remove: bool = True) -> list[str]:
    """``docker run [--rm] OPTIONS... IMAGE COMMAND...`` (``remove``: the container goes when it ends)."""
    return argv("run", *(["--rm"] if remove else []), *options, image, *command)


def build_argv(dockerfile: Path, tag: str, context: Path, *, build_args: Mapping[str, str] = {},
               labels: Mapping[str, str] = {}) -> list[str]:
    """``docker build -f DOCKERFILE -t TAG --build-arg K=V... --label K=V... CONTEXT``."""
    return argv("build", "-f", str(dockerfile), "-t", tag, *(w for k, v in build_args.items() for w in
                ("--build-arg", f"{k}={v}")), *(w for k, v in labels.items() for w in ("--label", f"{k}={v}")),
                str(context))


def pull_argv(image: str) -> list[str]:
    return argv("pull", "-q", image)


def import_argv(tarball: Path, tag: str, *, changes: Sequence[str] = ()) -> list[str]:
    """``docker import [--change C]... TARBALL TAG``: an image of a root file system."""
    return argv("import", *(w for c in changes for w in ("--change", c)), str(tarball), tag)


# ----------------------------------------------------------------------------- engine and compose CLI

def engine_version() -> str:
    """The engine's version; TestbedError when the CLI is missing, the socket refuses this user, or no
    daemon answers."""
    if which("docker") is None:
        raise TestbedError("the docker CLI is not installed", hint=ENGINE_HINT)
    try:
        proc = run(argv("version", "--format", "{{.Server.Version}}"), timeout=15)
    except ToolError as exc:
        if "permission denied" in exc.stderr.lower():
            from orchestrator.backends.docker_socket import SOCKET_HINT, denied_message

            raise TestbedError(denied_message(exc.stderr, DEFAULT_HOST), hint=SOCKET_HINT,
                               evidence=exc.evidence) from exc
        raise TestbedError("the Docker engine does not answer (is dockerd running?)", hint=ENGINE_HINT,
                           evidence=exc.evidence) from exc
    return proc.stdout.strip()


@lru_cache(maxsize=1)
def engine_is_rootless() -> bool:
    """Rootless Docker (the engine runs in its user's user namespace: container uid 0 IS that user)."""
    proc = run(argv("info", "--format", "{{json .SecurityOptions}}"), timeout=30)
    return any("name=rootless" in str(o) for o in json.loads(proc.stdout or "[]") or [])


USER_ENV = "TESTBED_CONTAINER_USER"


def container_user() -> str:
    """``uid:gid`` for every container we start, so whatever they write into a run folder belongs to the
    user who runs testbed. Under rootless Docker that user is container root (other uids map to
    subordinate ids the user cannot delete), so 0:0; on a host without uids (Windows) also 0:0.
    $TESTBED_CONTAINER_USER overrides it (a shared results folder owned by a group, say)."""
    if os.environ.get(USER_ENV):
        return os.environ[USER_ENV]
    if not hasattr(os, "getuid") or engine_is_rootless():
        return "0:0"
    return f"{os.getuid()}:{os.getgid()}"


@lru_cache(maxsize=1)
def compose_command() -> tuple[str, ...]:
    """`docker compose` (plugin) when it exists, else a standalone `docker-compose` v2."""
    seen = []
    for cand in _compose_candidates(argv("compose")):
        try:
            proc = run([*cand, "version", "--short"], check=False, timeout=15)
        except TestbedError:
            continue
        version = proc.stdout.strip().lstrip("v")
        if proc.returncode == 0 and version[:1].isdigit():
            if int(version.split(".")[0]) >= 2:
                return tuple(cand)
            seen.append(f"{' '.join(cand)} {version} (v1: too old)")
    detail = "; found: " + ", ".join(seen) if seen else ""
    raise TestbedError("docker compose v2 is missing" + detail, hint=install_hint.compose(install_hint.this_machine()))


def compose_version() -> str:
    return run([*compose_command(), "version", "--short"], timeout=15).stdout.strip()


# ----------------------------------------------------------------------------- typed inspect output

class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


def _timestamp(value: object) -> object:
    """The engine writes 0001-01-01T00:00:00Z for "never": None."""
    return None if isinstance(value, str) and value.startswith("0001-01-01") else value


class HealthProbe(_Model):
    start: dt.datetime | None = Field(None, alias="Start")
    exit_code: int = Field(alias="ExitCode")
    output: str = Field("", alias="Output")

    _start = field_validator("start", mode="before")(_timestamp)


class Health(_Model):
    status: str = Field(alias="Status")
    failing_streak: int = Field(0, alias="FailingStreak")
    log: list[HealthProbe] = Field(default_factory=list, alias="Log")

    @property
    def last_output(self) -> str | None:
        return self.log[-1].output.strip() or None if self.log else None

    def first_failing_probe(self) -> HealthProbe | None:
        """The earliest failed probe of the current failing streak (the log keeps the last five)."""
        failing = [p for p in self.log[-self.failing_streak:] if p.exit_code != 0] if self.failing_streak else []
        return failing[0] if failing else None


class ContainerState(_Model):
    status: str = Field(alias="Status")  # created | running | paused | restarting | exited | dead
    exit_code: int = Field(0, alias="ExitCode")
    oom_killed: bool = Field(False, alias="OOMKilled")
    error: str = Field("", alias="Error")
    pid: int = Field(0, alias="Pid")
    started_at: dt.datetime | None = Field(None, alias="StartedAt")
    finished_at: dt.datetime | None = Field(None, alias="FinishedAt")
    health: Health | None = Field(None, alias="Health")

    _times = field_validator("started_at", "finished_at", mode="before")(_timestamp)

    @property
    def running(self) -> bool:
        return self.status == "running"


class HostConfig(_Model):
    """The privileges a container was given (what the helper-container test checks)."""

    cap_add: list[str] = Field(default_factory=list, alias="CapAdd")
    cap_drop: list[str] = Field(default_factory=list, alias="CapDrop")
    privileged: bool = Field(False, alias="Privileged")
    pid_mode: str = Field("", alias="PidMode")
    network_mode: str = Field("", alias="NetworkMode")
    binds: list[str] = Field(default_factory=list, alias="Binds")

    _lists = field_validator("cap_add", "cap_drop", "binds", mode="before")(lambda v: v or [])


class Container(_Model):
    """What we read of one container's `docker inspect` object."""

    id: str
    name: str
    service: str | None
    image: str  # what it was created from (Config.Image: a tag, which may name another image by now)
    image_id: str = ""  # the image it runs (docker inspect's .Image: that image's id, whatever its tag names now)
    state: ContainerState
    ips: list[str] = Field(default_factory=list)
    addresses: dict[str, str] = Field(default_factory=dict)  # network name -> "ip/prefix length"
    ports: list[str] = Field(default_factory=list)  # host_ip:host_port->container_port
    labels: dict[str, str] = Field(default_factory=dict)
    user: str = ""
    host_config: HostConfig = Field(default_factory=lambda: HostConfig.model_validate({}))
    mounts: list[str] = Field(default_factory=list)  # every mount's source (binds and volumes)

    @classmethod
    def from_inspect(cls, raw: Mapping[str, Any]) -> Container:
        config = raw.get("Config") or {}
        net = raw.get("NetworkSettings") or {}
        ports = [f"{b.get('HostIp')}:{b.get('HostPort')}->{cport.split('/')[0]}"
                 for cport, binds in (net.get("Ports") or {}).items() for b in (binds or [])]
        ips = [n["IPAddress"] for n in (net.get("Networks") or {}).values() if n.get("IPAddress")]
        labels, user = config.get("Labels") or {}, config.get("User") or ""
        return cls(id=raw["Id"], name=str(raw["Name"]).lstrip("/"), service=labels.get(SERVICE_LABEL),
                   image=str(config.get("Image", "")), state=ContainerState.model_validate(raw["State"]),
                   image_id=str(raw.get("Image") or ""), ips=ips, ports=ports, labels=labels, user=str(user),
                   addresses={k: f"{n['IPAddress']}/{n.get('IPPrefixLen') or 32}"
                              for k, n in (net.get("Networks") or {}).items() if n.get("IPAddress")},
                   host_config=HostConfig.model_validate(raw.get("HostConfig") or {}),
                   mounts=[str(m.get("Source") or m.get("Name") or "") for m in raw.get("Mounts") or []])


class Image(_Model):
    id: str
    labels: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_inspect(cls, raw: Mapping[str, Any]) -> Image:
        return cls(id=raw["Id"], labels=(raw.get("Config") or {}).get("Labels") or {})


def parse_containers(text: str) -> list[Container]:
    """`docker inspect` output (a JSON array) -> containers, sorted by service then name."""
    items = json.loads(text or "[]")
    return sorted((Container.from_inspect(raw) for raw in items), key=lambda c: (c.service or "", c.name))


# ----------------------------------------------------------------------------- which service failed first

class Failure(_Model):
    service: str
    at: dt.datetime | None
    what: str  # "exited with code 1", "failed its health check: ..."

    def __str__(self) -> str:
        return f"{self.service} {self.what}"

    def first(self) -> str:
        return f"{self.service} failed first ({self.what})"


def failure_of(c: Container) -> Failure | None:
    """A container that exited non-zero, was OOM-killed, could not start, or runs unhealthy."""
    s, at, what = c.state, c.state.finished_at, None
    if s.oom_killed:
        what = f"was killed for lack of memory (OOMKilled, exit code {s.exit_code})"
    elif s.status in ("exited", "dead") and s.exit_code != 0:
        what = f"exited with code {s.exit_code}"
    elif s.status == "created" and s.error:
        what = "could not start"
    elif s.running and s.health is not None and s.health.status == "unhealthy":
        probe = s.health.first_failing_probe()
        at = probe.start if probe else None
        out = s.health.last_output
        what = "failed its health check" + (f": {out}" if out else "")
    if what is None:
        return None
    return Failure(service=c.service or c.name, at=at, what=what + (f" ({s.error})" if s.error else ""))


def first_failure(containers: Sequence[Container]) -> Failure | None:
    """The earliest failure: smallest FinishedAt among failed exits, or the first failing health probe."""
    found = [f for f in (failure_of(c) for c in containers) if f is not None]
    never = dt.datetime.max.replace(tzinfo=dt.UTC)
    return min(found, key=lambda f: f.at or never) if found else None


# ----------------------------------------------------------------------------- engine calls (docker CLI)

ENGINE_GONE = ("Cannot connect to the Docker daemon", "error during connect")  # the CLI's words: no engine answered


def _only_missing(stderr: str) -> bool:
    return all("no such" in ln.lower() for ln in stderr.splitlines() if ln.strip())


def inspect_containers(names: Sequence[str]) -> list[Container]:
    """The named containers that exist (missing ones are left out); ToolError when the engine fails."""
    if not names:
        return []
    command = argv("inspect", "--type", "container", *names)
    proc = run(command, check=False, timeout=30)
    if proc.returncode != 0 and not _only_missing(proc.stderr):
        gone = any(words in proc.stderr for words in ENGINE_GONE)  # a dockerd stopped or being restarted
        raise ToolError(command, proc.returncode, proc.stdout, proc.stderr, hint=ENGINE_HINT if gone else None,
                        message=f"the Docker engine stopped answering while inspecting {' '.join(names)}" if gone
                        else None)
    return parse_containers(proc.stdout)


def container(name: str) -> Container | None:
    return next(iter(inspect_containers([name])), None)


def project_containers(project: str) -> list[Container]:
    """Every container (any state) of a compose project, by its label."""
    proc = run(argv("ps", "-aq", "--no-trunc", "--filter", f"label={PROJECT_LABEL}={project}"), timeout=30)
    return inspect_containers(proc.stdout.split())


def labelled_containers(label: str, *, publish: int | None = None) -> list[Container]:
    """Every container (any state) carrying ``label`` (key=value), or only those publishing host port ``publish``."""
    command = argv("ps", "-aq", "--no-trunc", "--filter", f"label={label}")
    if publish is not None:
        command += ["--filter", f"publish={publish}"]
    return inspect_containers(run(command, timeout=30).stdout.split())


def container_pid(name: str) -> int:
    """The main process of a running container (its network namespace is /proc/<pid>/ns/net)."""
    c = container(name)
    if c is None or not c.state.running or c.state.pid == 0:
        state = c.state.status if c is not None else "missing"
        raise TestbedError(f"container {name} is not running ({state})", hint="is the testbed up? (`testbed up`)")
    return c.state.pid


def container_ip(name: str) -> str:
    """The container's first address on a Docker network."""
    c = container(name)
    if c is None or not c.ips:
        raise TestbedError(f"container {name} has no IP address on a Docker network")
    return c.ips[0]


def run_detached(image: str, name: str, *, options: Sequence[str] = (), command: Sequence[str] = ()) -> str:
    """``docker run -d`` (a container we remove ourselves: no --rm, so a dead one can be inspected); its id."""
    proc = run(run_argv(image, *command, options=["-d", "--name", name, *options], remove=False), timeout=60)
    return proc.stdout.strip()


def remove(names: Sequence[str]) -> None:
    """Force-remove containers; missing ones are fine."""
    if names:
        run(argv("rm", "-f", *names), check=False, timeout=60)


def kill(name: str, signal: str) -> None:
    run(argv("kill", "--signal", signal, name), timeout=30)


def wait_exited(name: str, timeout_s: float, *, interval_s: float = 0.1) -> int | None:
    """Wait until the container has exited; its exit code, or None on timeout (or when it never existed)."""
    waited = poll(lambda: container(name), lambda c: c is not None and c.state.status in ("exited", "dead"),
                  timeout_s, interval_s=interval_s)
    return waited.value.state.exit_code if waited.met and waited.value is not None else None


def remove_labelled(label: str) -> list[str]:
    """Remove every container, network and volume carrying ``label``; what was removed."""
    removed: list[str] = []
    for kind, ls_args in (("container", ["ps", "-aq"]), ("network", ["network", "ls", "-q"]),
                          ("volume", ["volume", "ls", "-q"])):
        ids = run(argv(*ls_args, "--filter", f"label={label}"), timeout=30).stdout.split()
        if ids:
            rm = argv("rm", "-f", *ids) if kind == "container" else argv(kind, "rm", *ids)
            run(rm, timeout=60, check=False)
            removed += [f"{kind} {i}" for i in ids]
    return removed


def inspect_images(tags: Sequence[str]) -> list[dict[str, Any]]:
    """`docker image inspect` of ``tags`` in one call: the images found (missing ones left out)."""
    command = argv("image", "inspect", *tags)
    proc = run(command, check=False, timeout=30)
    if proc.returncode != 0 and not _only_missing(proc.stderr):
        raise ToolError(command, proc.returncode, proc.stdout, proc.stderr)
    return list(json.loads(proc.stdout or "[]"))


def inspect_image(tag: str) -> Image | None:
    items = inspect_images([tag])
    return Image.from_inspect(items[0]) if items else None
