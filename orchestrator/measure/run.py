"""`testbed run`: one measurement, end to end.

up (fresh broker, capture, subscriber) -> capture running BEFORE any client connects -> subscriber
subscribed -> publisher started -> wait by COUNTING received messages (or a timeout derived from
N x interval) -> capture stopped with SIGINT (flushes) -> verdict (naming the service that failed
first) -> teardown (always, also on Ctrl-C; every container's log and state saved into logs/ first) ->
analysis -> per_message.csv, packets.csv, metrics.json, cell.json in the run folder.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.backends import compose, docker
from orchestrator.backends.compose import Topology
from orchestrator.backends.docker import Container
from orchestrator.backends.docker_stats import StatsSampler
from orchestrator.backends.images import missing_images
from orchestrator.backends.impairment import check_supported, resolve_mechanism, router
from orchestrator.backends.impairment.board import board_mechanism, check_board_profile
from orchestrator.backends.process import which
from orchestrator.errors import TestbedError
from orchestrator.lab.board_side import board_exposure, start_time_echo
from orchestrator.lab.pki import Pki
from orchestrator.lab.topology import TOPIC, running_lab, wait_for_messages
from orchestrator.measure.analyse import analyse_run_folder
from orchestrator.measure.cell import CellWriter, Observed, utc_now
from orchestrator.measure.impairment import LineWatch, impairment_applied
from orchestrator.measure.labanalysis import add_lab_metrics
from orchestrator.measure.multihost import lab_preflight, measure_lab
from orchestrator.model.cell import CellRecord
from orchestrator.model.impairment import Impairment, load_impairment
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec, effective_connection
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.publishers import Publisher, fleet
from orchestrator.publishers.board.publisher import BoardPublisher
from orchestrator.publishers.virtual import VirtualPublisher
from orchestrator.results.atomic import read_json
from orchestrator.waiting import throttled

SERVICES_FOR_RUN = compose.SERVICES


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # ok | failed | interrupted
    received: int
    error: str | None
    metrics: dict[str, Any] | None


def default_run_dir(spec: RunSpec) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / "runs" / f"{stamp}-{spec.scenario.replace('/', '_')}-{spec.payload}B"


def check_publisher_can_speak(scenario: Scenario, spec: RunSpec) -> None:
    if scenario.tls is not None and scenario.tls.client_version == "1.3":
        raise TestbedError(
            f"scenario {scenario.name} needs TLS 1.3, but the {spec.publisher} ESP32's mbedTLS 2.28 speaks "
            "TLS 1.2 only", hint="use a TLS 1.2 scenario (tls, tls-aes128gcm) with the ESP32 publisher")


def preflight(scenario: Scenario, spec: RunSpec) -> Impairment:
    """Everything that can be checked before a container starts; the run's impairment profile."""
    check_publisher_can_speak(scenario, spec)
    if spec.inventory is not None:  # across the lab's hosts: nothing runs in a container here
        return lab_preflight(spec)
    fleet.check_planned(spec)
    impairment = load_impairment(spec.impairment)
    mechanism: str = spec.delay_mechanism
    if spec.publisher == "esp32":  # the board's path: at the broker's ingress (backends/impairment/board.py)
        check_board_profile(impairment, mechanism)
        mechanism = board_mechanism(impairment) or mechanism
    check_supported(impairment, mechanism=mechanism)  # e.g. netem asked on a kernel without it
    if which("tshark") is None:
        raise TestbedError("tshark is missing on this host (the analysis needs it)",
                           hint="apt-get install -y tshark")
    docker.engine_version()
    docker.compose_command()
    missing = missing_images(SERVICES_FOR_RUN)
    if missing:
        raise TestbedError(f"images not built: {', '.join(missing)}", hint="testbed images build")
    return impairment


def execute_run(spec: RunSpec, run_dir: Path, *, cell: dict[str, Any] | None = None,
                progress: Callable[[int, int], None] = lambda _n, _t: None,
                status: Callable[[str], None] = lambda _m: None, analyse: bool = True) -> RunOutcome:
    """One run into ``run_dir``. Raises TestbedError for setup failures; a run that started and failed
    returns status 'failed' with its logs kept; KeyboardInterrupt is re-raised after cleanup."""
    scenario = load_scenario(spec.scenario)
    impairment = preflight(scenario, spec)
    asked = spec.connection
    used, why = effective_connection(asked, scenario.is_tls)
    if why:
        spec = spec.model_copy(update={"connection": used})
        status(f"{run_dir.name}: {why}")
    run_dir.mkdir(parents=True, exist_ok=True)
    record = CellWriter(Layout(run_dir), CellRecord.model_validate({
        "cell_id": run_dir.name, "scenario": scenario.name, "payload": spec.payload,
        "impairment": spec.impairment, "repeat": 1, **(cell or {}),
        "connection": {"asked": asked, "used": used, "per_connection": spec.per_connection, "close": spec.close,
                       "note": why},
        "spec": spec.model_dump(), "status": "running", "error": None, "started_utc": utc_now(), "timings": {}}))
    record.save()
    try:
        seen = measure(scenario, spec, impairment, record, progress, status)
        if spec.publisher == "esp32":
            record.record.board = board_facts(Layout(run_dir))
    except KeyboardInterrupt:
        record.save(status="interrupted", error="interrupted by the user (SIGINT)", finished_utc=utc_now())
        raise
    except TestbedError as exc:
        record.save(status="failed", error=exc.message, finished_utc=utc_now())
        raise
    record.record.status, record.record.error = ("failed" if seen.error else "ok"), seen.error
    metrics = record_analysis(record, scenario, spec, seen.resources, status) if analyse else None
    record.save(received=seen.received, publisher_exit_code=seen.publisher_exit_code, finished_utc=utc_now())
    return RunOutcome(run_dir, record.record.status, seen.received, record.record.error, metrics)


def measure(scenario: Scenario, spec: RunSpec, impairment: Impairment, record: CellWriter,
            progress: Callable[[int, int], None], status: Callable[[str], None]) -> Observed:
    """Up, publisher, impairment, count, stop, verdict; the teardown (which saves every container's log
    and state into logs/) runs before this returns, also when it raises."""
    if spec.inventory is not None:  # across the lab's hosts
        return measure_lab(scenario, spec, impairment, record, progress, status)
    status(f"{record.cell_id}: starting broker, capture and subscriber")
    board = spec.publisher == "esp32"
    # a board's cell: published on the board's address only, with authentication and an ACL (lab/board_side.py)
    exposure = board_exposure(scenario, spec.board_host, TOPIC) if board else None
    if exposure is not None:
        record.record.exposure = exposure.facts()
        status(f"{record.cell_id}: {exposure.line()}")
    with running_lab(scenario, record.lay.root, qos=spec.qos, exposure=exposure) as (lay, pki, topo):
        record.lap("up")
        publisher: Publisher
        if exposure is not None:
            mechanism = board_mechanism(impairment)
            publisher = board_publisher(exposure.scenario, lay, pki, spec, topo)
        else:
            mechanism = resolve_mechanism(impairment, spec.delay_mechanism)
            topo, host = place_publisher(topo, mechanism)
            publisher = VirtualPublisher(scenario, lay, pki, spec, host=host)
        sampler = StatsSampler(compose.container_name("broker")).start()
        if spec.is_fleet:
            record.record.broker_nofile = fleet.check_broker(spec)
        fleet_note = f" from each of {spec.devices} devices at {spec.connect_rate:g}/s" if spec.is_fleet else ""
        status(f"{record.cell_id}: publishing {spec.samples} x {spec.payload} B{fleet_note}")
        publisher.start(topo)
        record.lap("publisher_start")
        try:
            with impairment_applied(impairment, lay, mechanism, spec.seed, board) as watch:
                record.lap("impair")
                publisher.go()
                seen = Observed(received=count_messages(lay, spec, progress, watch, publisher))
                record.lap("publish")
                seen.publisher_exit_code = publisher.wait_exit(
                    timeout_s=15 if seen.received >= spec.messages_expected else 2)
                seen.containers = compose.containers()
                time.sleep(0.3)  # let the last segments (ACKs, DISCONNECT) reach the capture
                seen.resources = sampler.stop()
                stop_capture()
            record.record.impairment_state = state = read_json(lay.impairment)
            seen.error = verdict(seen, spec, publisher, watch.problem or (state or {}).get("line_problem"))
        finally:  # a run still going ends here, also on Ctrl-C (a board would publish on into the next cell)
            publisher.stop()
        record.lap("stop")
    record.lap("teardown")
    return seen


def place_publisher(topo: Topology, mechanism: str | None) -> tuple[Topology, str]:
    """Where the publisher sits and what it connects to: the lab network and `broker`, or, for the
    userspace delay line, behind the router (network uplink) to the broker's lab address."""
    if mechanism != "queue":
        return topo, "broker"
    topo = replace(topo, publisher_network="uplink")
    compose.start_service(topo, compose.ROUTER)
    return topo, router.broker_address(compose.container_name("broker"))


def board_publisher(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, topo: Topology) -> BoardPublisher:
    """The board as this cell's publisher: the broker and the time-echo service on the lab host's address,
    the only one they are published on."""
    address = topo.bind
    sync_port = start_time_echo(topo, address)
    return BoardPublisher(scenario, lay, pki, spec, broker_host=address, broker_port=topo.host_port,
                          sync=(address, sync_port))


def board_facts(lay: Layout) -> dict[str, Any] | None:
    """The board's banner (chip, MAC, firmware, versions, CPU, power save, crypto in hardware) for cell.json."""
    return (read_json(lay.publisher_summary) or {}).get("board")


def count_messages(lay: Layout, spec: RunSpec, progress: Callable[[int, int], None],
                   watch: LineWatch | None = None, publisher: Publisher | None = None) -> int:
    """Count until every message arrived, the timeout, or (checked once a second) a container failed,
    the delay line broke or a board's run ended early."""
    def broken() -> bool:
        ended = isinstance(publisher, BoardPublisher) and publisher.wait_exit(0) == 1
        return ended or run_broken(compose.containers()) or (watch is not None and watch.broken())

    total = spec.messages_expected
    n = wait_for_messages(lay, total, spec.timeout_s(), lambda k: progress(k, total), throttled(broken, 1.0))
    progress(n, total)
    return n


def run_broken(containers: list[Container]) -> bool:
    """A container failed, or one the run needs (broker, capture, subscriber) is no longer running."""
    return docker.first_failure(containers) is not None or bool(stopped_core(containers))


def stopped_core(containers: list[Container]) -> list[Container]:
    return [c for c in containers if c.service in compose.CORE_SERVICES and not c.state.running]


def stop_capture() -> None:
    """SIGINT makes dumpcap flush the pcapng; wait for it to exit."""
    name = compose.container_name("capture")
    c = docker.container(name)
    if c is not None and c.state.running:
        docker.kill(name, "SIGINT")
        docker.wait_exited(name, timeout_s=20)


def verdict(seen: Observed, spec: RunSpec, publisher: Publisher, line_problem: str | None = None) -> str | None:
    """None for a good run, else the error, naming the service that failed first (or the delay line)."""
    if line_problem:
        return f"impairment: {line_problem}"
    pub_error = publisher.error() if seen.publisher_exit_code != 0 else None
    failure = docker.first_failure(seen.containers)
    if failure is not None and failure.service == publisher.service:
        return f"{failure.first()}: {pub_error}"
    if failure is not None:
        return f"{failure.first()}; publisher: {pub_error or 'ok'}"
    stopped = stopped_core(seen.containers)
    if stopped:
        c = stopped[0]
        return (f"the {c.service} container stopped mid-run ({c.state.status}, exit code {c.state.exit_code}); "
                f"publisher: {pub_error or 'ok'}")
    if pub_error is not None:
        return pub_error
    if seen.received < spec.messages_expected:
        return (f"only {seen.received} of {spec.messages_expected} messages arrived within "
                f"{spec.timeout_s():.0f} s")
    return None


def record_analysis(record: CellWriter, scenario: Scenario, spec: RunSpec, resources: dict[str, Any],
                    status: Callable[[str], None]) -> dict[str, Any] | None:
    """The run folder's analysis (metrics.json and the tables); its failure fails an ok cell in the record."""
    if not record.lay.capture.exists():
        return None
    status(f"{record.cell_id}: analysing the capture")
    try:
        metrics = analyse_run_folder(record.lay.root, scenario, spec, resources,
                                     more=add_lab_metrics if spec.inventory is not None else None)
    except TestbedError as exc:
        if record.record.status == "ok":
            record.record.status, record.record.error = "failed", f"analysis: {exc.message}"
        else:
            record.warn(f"analysis: {exc.message}")
        return None
    record.lap("analysis")
    return metrics
