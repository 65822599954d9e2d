"""One live topology (broker + capture + subscriber [+ publisher]) for `testbed up` or one run.

The run folder (its layout: orchestrator/model/layout.py) is mounted at /data in every container. When
the project goes down, every container's output is kept in logs/<service>.log and their states (exit
code, OOMKilled, health and its last probe) in logs/containers.json: a failed run keeps its evidence.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from orchestrator.backends import compose, docker, docker_endpoint
from orchestrator.backends.compose import Topology
from orchestrator.backends.docker import Container, Failure
from orchestrator.backends.images import image_exists
from orchestrator.backends.images import spec as image_spec
from orchestrator.errors import TestbedError
from orchestrator.lab.board_side import Exposure
from orchestrator.lab.broker import broker_for
from orchestrator.lab.pki import Pki, ensure_pki
from orchestrator.model.brokers import BrokerBuild
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import Scenario
from orchestrator.model.subscription import AT_QOS0, Subscription
from orchestrator.results.atomic import protect_secrets, write_json_atomic, write_text_atomic
from orchestrator.signals import sigint_deferred
from orchestrator.waiting import poll, throttled, wait_until

TOPIC = "testbed/sensors"


def prepare_run_dir(run_dir: Path, scenario: Scenario, *, acl: bool = False, pki_from: Path | None = None,
                    websocket: bool = False, build: BrokerBuild | None = None) -> tuple[Layout, Pki | None]:
    """Folders, rendered broker config and (for TLS) the throwaway PKI; ``acl``: a broker reachable beyond
    loopback, where only the run's publisher may write the measured topic (config/acl); ``pki_from``: the PKI of
    the lab the run joins (a kept-up lab's, lab/keptlab.py), copied rather than made; ``websocket``: the broker's
    listener speaks MQTT over WebSocket (the cell's transport); ``build``: the cell's broker build (None: Mosquitto),
    whose configuration is written."""
    lay = Layout(run_dir)
    for d in (lay.config, lay.pki, lay.capture.parent, lay.logs, lay.keylogs):
        d.mkdir(parents=True, exist_ok=True)
    if pki_from is not None:
        shutil.copytree(pki_from, lay.pki, dirs_exist_ok=True)
    broker_for(build).write_config(lay, scenario, topic=TOPIC, acl=acl, websocket=websocket)
    # the scenario as run, so `testbed report` can re-analyse without the original YAML
    write_json_atomic(lay.scenario, scenario.model_dump(mode="json"))
    pki = None
    if scenario.tls is not None:
        pki = ensure_pki(lay.pki, scenario.tls.key_type, clients=scenario.tls.client_auth == "certificate")
    elif not scenario.anonymous:
        pki = ensure_pki(lay.pki, "ecdsa-p256")  # only its passwords.txt is used
    # an earlier run's files must not be mistaken for this one's
    evidence = [lay.container_log(s) for s in compose.SERVICES] + [lay.containers]
    for stale in (lay.capture, lay.subscriber_log, lay.subscriber_status, lay.publisher_go, *evidence):
        if stale.exists():
            stale.unlink()
    return lay, pki


def subscriber_args(scenario: Scenario, lay: Layout, sub: Subscription = AT_QOS0, *,
                    topic: str = TOPIC) -> list[str]:
    """The subscriber's command line in its container; ``sub``: the cell's QoS, MQTT version and session."""
    args = ["--host", "broker", "--port", str(scenario.port), "--topic", topic, *sub.argv(),
            "--out", lay.in_container(lay.subscriber_log), "--status", lay.in_container(lay.subscriber_status)]
    if scenario.tls is not None:
        args += ["--tls", "--ca", lay.in_container(lay.pki / "ca.crt"), "--server-name", "broker",
                 "--tls-max", scenario.tls.client_version,
                 "--keylog", lay.in_container(lay.keylogs / "subscriber.keys")]
        if scenario.client_ciphers_openssl():
            args += ["--ciphers", ":".join(scenario.client_ciphers_openssl())]
        if scenario.tls.client_auth == "certificate":
            args += ["--cert", lay.in_container(lay.pki / "subscriber.crt"),
                     "--key", lay.in_container(lay.pki / "subscriber.key")]
    if not scenario.anonymous and (scenario.tls is None or scenario.tls.client_auth == "password"):
        args += ["--username", "subscriber", "--password-file", lay.in_container(lay.pki / "passwords.txt")]
    return args


def topology(scenario: Scenario, lay: Layout, *, host_port: int | None = None, expose: bool = False,
             sub: Subscription = AT_QOS0, publisher_args: list[str] | None = None,
             bind: str | None = None) -> Topology:
    """``bind``: the one host address the ports are published on (a board's); else 0.0.0.0 with ``expose``,
    127.0.0.1 without."""
    return Topology(run_dir=lay.root, port=scenario.port, host_port=host_port or scenario.port,
                    bind=bind or ("0.0.0.0" if expose else "127.0.0.1"),
                    subscriber_args=subscriber_args(scenario, lay, sub),
                    publisher_args=publisher_args or [], user=docker.container_user(),
                    broker_image=broker_image(sub))


def broker_image(sub: Subscription) -> str:
    """The image tag of the cell's broker build (model/brokers.py: a websocket cell's is Mosquitto 2.0.21), refused
    by name when it is not built (compose would otherwise build images/broker's Dockerfile under that tag)."""
    build = sub.build
    tag = image_spec(build.image).tag
    if build.image != "broker" and not image_exists(tag):
        raise TestbedError(f"--transport {sub.transport} --broker {sub.broker} runs on broker {build.name}, whose "
                           f"image {tag} is not built", hint=f"testbed images build {build.image}")
    return tag


def read_status(lay: Layout) -> dict[str, object]:
    try:
        return dict(json.loads(lay.subscriber_status.read_text()))
    except (OSError, ValueError):
        return {}


def wait_subscribed(lay: Layout, timeout_s: float = 30.0) -> dict[str, object]:
    """Wait until the subscriber reports SUBACK; once a container failed (or the subscriber's is not running)
    it never will: TestbedError naming the service that failed first."""
    def subscribed() -> dict[str, object] | None:
        st = read_status(lay)
        if st.get("error"):
            raise TestbedError(f"the subscriber failed: {st['error']}", evidence=compose.logs(["subscriber"]))
        if st.get("subscribed"):
            return st
        containers_failed()  # at most every 0.5 s: the status file is read every 0.05 s
        return None

    def failed() -> bool:
        found = compose.containers()
        subscriber = next((c for c in found if c.service == "subscriber"), None)
        if docker.first_failure(found) is not None or subscriber is None or not subscriber.state.running:
            state = subscriber.state.status if subscriber else "gone"
            raise compose.service_failure("the subscriber never subscribed", detail=f"its container is {state}")
        return False

    containers_failed = throttled(failed, 0.5)

    return wait_until(subscribed, timeout_s, interval_s=0.05, describe="the subscriber did not subscribe",
                      evidence=lambda: compose.logs(["subscriber", "broker"]))


def count_lines(path: Path) -> int:
    """Complete data lines of a line-buffered CSV (header and a torn last line excluded)."""
    try:
        data = path.read_bytes()
    except OSError:
        return 0
    return max(0, data.count(b"\n") - 1)


def wait_for_messages(lay: Layout, expected: int, timeout_s: float,
                      progress: Callable[[int], None] = lambda _n: None,
                      stop_early: Callable[[], bool] = lambda: False) -> int:
    """Count (not sleep) until ``expected`` messages arrived, ``stop_early()`` or the timeout; the count."""
    def received() -> int:
        n = count_lines(lay.subscriber_log)
        progress(n)
        return n

    return poll(received, lambda n: n >= expected or stop_early(), timeout_s, interval_s=0.05).value


@contextmanager
def running_lab(scenario: Scenario, run_dir: Path, *, host_port: int | None = None, expose: bool = False,
                sub: Subscription = AT_QOS0, keep: bool = False,
                exposure: Exposure | None = None) -> Iterator[tuple[Layout, Pki | None, Topology]]:
    """Bring up broker + capture + subscriber; always tear down (also on Ctrl-C) unless keep=True, first
    saving every container's log and state into the run folder (and making its secret files 0600).
    ``exposure`` (a board's cell): published on its address only, its scenario (with authentication) and
    the ACL."""
    if exposure is not None:
        scenario = exposure.scenario
    lay, pki = prepare_run_dir(run_dir, scenario, acl=exposure is not None, websocket=sub.websocket,
                               build=sub.build)
    topo = topology(scenario, lay, host_port=host_port, expose=expose, sub=sub,
                    bind=exposure.address if exposure else None)
    # a port someone connects to (asked for, a board's, exposed) is kept or refused by name; else a free one
    topo = compose.with_host_port(topo, fixed=host_port is not None or exposure is not None or expose)
    try:
        compose.up(topo)
        wait_subscribed(lay)
        yield lay, pki, topo
    except BaseException:
        keep = False
        raise
    finally:
        if not keep:
            with sigint_deferred():
                try:
                    save_evidence(lay)
                finally:
                    compose.down()
                    protect_secrets(lay.root)  # what a container wrote (a key log) is its owner's only


def stop_capture() -> None:
    """SIGINT makes dumpcap flush the pcapng; wait for it to exit."""
    name = compose.container_name("capture")
    c = docker.container(name)
    if c is not None and c.state.running:
        docker.kill(name, "SIGINT")
        docker.wait_exited(name, timeout_s=20, interval_s=0.02)  # dumpcap exits within about 0.1 s


def container_logs(found: list[Container], tail: int = 100000) -> dict[str, str]:
    """Each container's output by service: through the engine's API (no program started: a sweep's cell saves
    them every time), else `compose logs`, side by side."""
    try:
        client = docker_endpoint.sdk_client()
        return {c.service or c.name: client.containers.get(c.name).logs(stdout=True, stderr=True, tail=tail)
                .decode("utf-8", errors="replace").strip() for c in found}
    except Exception:  # noqa: BLE001 - any failure of the API: compose reads them as it always did
        services = [c.service or c.name for c in found]
        with ThreadPoolExecutor(max_workers=max(1, len(services))) as pool:
            return dict(zip(services, pool.map(lambda s: compose.logs([s], tail=tail), services), strict=True))


def save_evidence(lay: Layout, *, own_logs: Sequence[str] = ()) -> Failure | None:
    """Every container's output (logs/<service>.log) and state (logs/containers.json); the first failure.
    ``own_logs``: services whose log there is their program's own (a kept-up lab's clients), left as it is."""
    try:
        found = compose.containers()
    except TestbedError as exc:  # the engine went away: say so where the evidence would be
        write_json_atomic(lay.containers, {"error": f"could not inspect the containers: {exc.message}"})
        return None
    for service, text in container_logs([c for c in found if c.service and c.service not in own_logs]).items():
        write_text_atomic(lay.container_log(service), text + "\n")
    failure = docker.first_failure(found)
    write_json_atomic(lay.containers, {
        "first_failure": failure.model_dump(mode="json") if failure else None,
        "containers": [c.model_dump(mode="json") for c in found]})
    return failure
