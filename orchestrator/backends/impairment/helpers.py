"""Helper containers: tc and nft run inside the network namespace of the container they impair.

One helper per impaired container, started with ``--network container:<target>`` and NET_ADMIN as its
ONLY capability: not privileged, no host PID namespace, no mounts, a read-only root file system. It
needs no root on the host and no host view of namespaces (/proc/<pid>/ns/net), so it works for a user
in the docker group, under rootless Docker and with Docker Desktop. The playbooks run their command
lines in it with ``docker exec`` (argv.enter_argv). A helper lives as long as the impairment does: it
is started before anything is applied and removed after the clear.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from orchestrator.backends import compose, docker, projects
from orchestrator.backends.compose import OWNED_LABEL
from orchestrator.backends.impairment.argv import HELPER_IMAGE
from orchestrator.backends.impairment.models import ImpairmentTarget, helper_name
from orchestrator.errors import TestbedError, ToolError

HELPER_LABEL = "io.testbed.helper"
CAPABILITIES = ("NET_ADMIN",)


def helper_options(target: str) -> list[str]:
    """``docker run`` options of the helper for container ``target`` (what the HostConfig test checks); labelled
    with this invocation's project and owner, so its teardown (compose.down) removes it and no other's does."""
    caps = [arg for cap in CAPABILITIES for arg in ("--cap-add", cap)]
    return ["--network", f"container:{target}", "--cap-drop", "ALL", *caps,
            "--security-opt", "no-new-privileges", "--read-only", "--user", "0:0",
            "--label", OWNED_LABEL, "--label", f"{HELPER_LABEL}={target}",
            "--label", f"{projects.PROJECT_LABEL}={compose.project()}",
            "--label", f"{projects.OWNER_LABEL}={projects.owner_slug()}"]


def containers_of(targets: Iterable[ImpairmentTarget]) -> list[str]:
    """The containers whose namespaces ``targets`` impair (container targets only), once each."""
    return sorted({t.container for t in targets if t.container})


def _running(name: str) -> bool:
    c = docker.container(name)
    return c is not None and c.state.running


def start_helpers(containers: Sequence[str]) -> None:
    """A fresh helper for each container (an old one of the same name is replaced)."""
    if containers and docker.inspect_image(HELPER_IMAGE) is None:
        raise TestbedError(f"the impairment helper image {HELPER_IMAGE} is not built", hint="testbed images build")
    if containers:
        projects.claim(compose.project())  # a live invocation's helpers: `testbed down` elsewhere leaves them
    for target in containers:
        if not _running(target):
            raise TestbedError(f"cannot impair container {target}: it is not running")
        docker.remove([helper_name(target)])
        try:
            docker.run_detached(HELPER_IMAGE, helper_name(target), options=helper_options(target))
        except ToolError as exc:
            raise TestbedError(f"could not start the impairment helper for {target}", evidence=exc.evidence,
                               hint="`testbed doctor` checks that a helper can join a container's namespace") \
                from exc


def dead(containers: Sequence[str]) -> list[str]:
    """The containers whose helper is no longer running (removed, killed, crashed)."""
    return [c for c in containers if not _running(helper_name(c))]


def revive(containers: Sequence[str]) -> list[str]:
    """Start a helper again where one is missing and its container still runs (to read the state and
    clear); the containers whose namespace is gone with neither running (nothing of ours can remain)."""
    gone = []
    for target in dead(containers):
        if _running(target):
            start_helpers([target])
        else:
            docker.remove([helper_name(target)])
            gone.append(target)
    return gone


def remove_helpers(containers: Sequence[str]) -> None:
    docker.remove([helper_name(c) for c in containers])


def describe_death(containers: Sequence[str]) -> str:
    """What the engine says of dead helpers (state, exit code), for the cell's error."""
    found = {c.name: c for c in docker.inspect_containers([helper_name(t) for t in containers])}
    parts = []
    for target in containers:
        c = found.get(helper_name(target))
        state = f"{c.state.status}, exit code {c.state.exit_code}" if c else "removed"
        parts.append(f"{helper_name(target)} ({state})")
    return ", ".join(parts)
