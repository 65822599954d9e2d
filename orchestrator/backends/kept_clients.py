"""The clients' containers of a sweep block's kept-up lab (lab/keptlab.py): made once per block, idle, and each
cell's client PROGRAM (the subscriber, the publisher) started in them through the engine's API (an exec).

A cell so starts two processes instead of two containers (a `compose up` each, 0.6 s on a busy 2-core host). What
makes a cell independent is new every cell: the subscriber's process, connection and session, the publisher's
process and connection, and (lab/broker.py restart_process) the broker's process. The containers mount the folder
holding the cells' run folders at /runs; a cell's command line, written for its own run folder at /data
(Layout.in_container), is rebased onto /runs/<cell>. A program's output goes into the cell's logs/<service>.log, as
a container's log does in a fresh lab, and its exit code is its exec's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.backends import compose, docker, docker_endpoint, engine_lost, projects
from orchestrator.backends.compose import Topology
from orchestrator.errors import TestbedError
from orchestrator.model.layout import DATA, Layout
from orchestrator.waiting import poll

SERVICES = ("subscriber", "publisher")
SUBSCRIBER_IMAGE = "testbed-subscriber:latest"  # compose/testbed.yml's subscriber service
MOUNT = "/runs"
IDLE = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
# the program's shell: its pid noted (stop() signals it), the publisher's go awaited as compose's entrypoint does
# (compose/testbed.yml), then the program in the shell's place, its output into the cell's log
PIDFILE = "/tmp/testbed-program.pid"
LAUNCH = (f'log=$1; go=$2; shift 2; echo $$ > {PIDFILE}; '
          'if [ -n "$go" ]; then while [ ! -e "$go" ]; do sleep 0.02; done; fi; exec "$@" > "$log" 2>&1')
SIGNAL = f'kill -"$1" "$(cat {PIDFILE})" 2>/dev/null || true'


def rebase(argv: Sequence[str], run_dir: Path, mount: str = MOUNT) -> list[str]:
    """``argv`` written for the run folder at /data, with every path in it at <mount>/<the run folder's name>."""
    new = f"{mount}/{run_dir.name}"
    return [new + a[len(DATA):] if a == DATA or a.startswith(DATA + "/") else a for a in argv]


class KeptClients:
    """The subscriber's and the publisher's containers of one kept-up lab, and the program each runs now."""

    def __init__(self, runs: Path) -> None:
        self.runs = runs  # the folder of the cells' run folders, mounted at /runs
        self.images: dict[str, str] = {}  # service -> the image its container runs
        self.programs: dict[str, str] = {}  # service -> the exec id of its program (this cell's, or the last)
        self.logs: dict[str, Path] = {}  # service -> its program's log on this host
        self.entrypoints: dict[str, list[str]] = {}  # image -> its entrypoint
        self._locks = {s: threading.Lock() for s in SERVICES}
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_endpoint.sdk_client()
        return self._client

    def holds(self, service: str) -> bool:
        return service in SERVICES

    def start(self, t: Topology, service: str) -> None:
        """The cell's program of ``service`` (its command line in ``t``, for the run folder ``t.run_dir``) started in
        its container, made first when there is none (or it runs another image: the cell's device stack's)."""
        if t.run_dir.resolve().parent != self.runs.resolve():
            raise TestbedError(f"run folder {t.run_dir} is not in {self.runs}, which the kept-up lab's clients mount")
        import docker as sdk

        lay = Layout(t.run_dir)
        args = t.publisher_args if service == "publisher" else t.subscriber_args
        go = lay.in_container(lay.publisher_go) if service == "publisher" else ""
        try:
            with self._locks[service], engine_lost.engine_api(f"starting the {service}"):
                entry = self._ensure(t, service, self._image(t, service))
            argv = rebase(["/bin/sh", "-c", LAUNCH, service, lay.in_container(lay.container_log(service)), go,
                           *entry, *args], t.run_dir)
            with engine_lost.engine_api(f"starting the {service}"):
                api = self.client.api
                exec_id = api.exec_create(compose.container_name(service), argv, stdout=False, stderr=False,
                                          user=t.user)["Id"]
                api.exec_start(exec_id, detach=True)
        except sdk.errors.DockerException as exc:
            raise TestbedError(f"the {service} could not be started in its kept-up container: {exc}") from exc
        self.programs[service], self.logs[service] = exec_id, lay.container_log(service)

    def prepare(self, t: Topology) -> None:
        """Both containers made side by side (the publisher's on ``t``'s image), before the block's first cell."""
        made = [threading.Thread(target=self._ensure_locked, args=(t, s, self._image(t, s)), name=f"make-{s}")
                for s in SERVICES]
        for thread in made:
            thread.start()
        for thread in made:
            thread.join()

    @staticmethod
    def _image(t: Topology, service: str) -> str:
        return t.publisher_image if service == "publisher" else SUBSCRIBER_IMAGE

    def _ensure_locked(self, t: Topology, service: str, image: str) -> None:
        try:
            with self._locks[service]:
                self._ensure(t, service, image)
        except Exception:  # noqa: BLE001 - start() makes it again and, failing, says why
            pass

    def _ensure(self, t: Topology, service: str, image: str) -> list[str]:
        """The container of ``service`` running ``image``; what the program is started with (the subscriber image's
        entrypoint; the publisher's command line names its program, vdevice or fleet)."""
        name = compose.container_name(service)
        if self.images.get(service) != image:
            self._remove([name])  # another image's, or one a failed attempt left
            labels = {docker.PROJECT_LABEL: compose.project(), docker.SERVICE_LABEL: service,
                      "com.docker.compose.oneoff": "False", "io.testbed.owned": "true",
                      projects.OWNER_LABEL: projects.owner_slug(), projects.PROJECT_LABEL: compose.project()}
            from docker.types import Ulimit

            network = t.publisher_network if service == "publisher" else "lab"
            self.client.containers.run(
                image, entrypoint=IDLE, name=name, user=t.user, labels=labels, detach=True,
                volumes={str(self.runs.resolve()): {"bind": MOUNT, "mode": "rw"}},
                network=compose.network_name(network), ulimits=[Ulimit(name="nofile", soft=t.nofile, hard=t.nofile)])
            self.images[service] = image
        if service == "publisher":
            return []
        if image not in self.entrypoints:
            self.entrypoints[image] = list(self.client.images.get(image).attrs["Config"]["Entrypoint"] or [])
        return self.entrypoints[image]

    def _state(self, service: str) -> dict[str, Any]:
        with engine_lost.engine_api(f"watching the {service}"):
            return dict(self.client.api.exec_inspect(self.programs[service]))

    def running(self, service: str) -> bool:
        return service in self.programs and bool(self._state(service).get("Running"))

    def wait_exit(self, service: str, timeout_s: float) -> int | None:
        """The exit code of the service's program once it ended, None while it still runs after ``timeout_s``."""
        if service not in self.programs:
            return None
        waited = poll(lambda: self._state(service), lambda s: not s.get("Running"), timeout_s, interval_s=0.02)
        code = waited.value.get("ExitCode")
        return int(code) if waited.met and code is not None else None

    def signal(self, service: str, sig: str = "TERM") -> None:
        """Send the service's program ``sig`` (nothing when it ended); returns once it is sent (not handled)."""
        if self.running(service):
            with engine_lost.engine_api(f"stopping the {service}"):
                api = self.client.api
                exec_id = api.exec_create(compose.container_name(service), ["/bin/sh", "-c", SIGNAL, "signal", sig],
                                          stdout=False, stderr=False)["Id"]
                api.exec_start(exec_id, detach=True)

    def stop(self, service: str, grace_s: float = 3.0) -> int | None:
        """End the service's program: SIGTERM, SIGKILL after ``grace_s``; its exit code."""
        if not self.running(service):
            return self.wait_exit(service, 0)
        self.signal(service, "TERM")
        code = self.wait_exit(service, grace_s)
        if code is None:
            self.signal(service, "KILL")
            code = self.wait_exit(service, 2.0)
        return code

    def log_tail(self, service: str, lines: int = 20) -> str:
        try:
            text = self.logs[service].read_text(errors="replace")
        except (KeyError, OSError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def remove(self) -> None:
        """Both containers gone (their programs with them); safe twice."""
        self._remove([compose.container_name(s) for s in self.images])
        self.images.clear()

    def _remove(self, names: list[str]) -> None:
        import docker as sdk

        for name in names:
            try:
                with engine_lost.engine_api(f"removing {name}"):
                    self.client.containers.get(name).remove(force=True)
            except sdk.errors.NotFound:
                pass
