"""`testbed run`: one measurement, end to end.

up (fresh broker, capture, subscriber) -> capture running BEFORE any client connects -> subscriber
subscribed -> publisher started -> wait by COUNTING received messages (or a timeout derived from
N x interval) -> capture stopped with SIGINT (flushes) -> teardown (always, also on Ctrl-C) ->
analysis -> per_message.csv, packets.csv, metrics.json, cell.json in the run folder.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.backends import compose, docker_engine
from orchestrator.backends.docker_stats import StatsSampler
from orchestrator.backends.images import missing_images
from orchestrator.backends.impairment import (
    ImpairmentTarget,
    check_supported,
    dropped_packets,
    impaired,
    targets_for_containers,
)
from orchestrator.backends.process import which
from orchestrator.errors import TestbedError
from orchestrator.lab.pki import Pki
from orchestrator.lab.topology import running_lab, wait_for_messages
from orchestrator.measure.analyse import analyse_run_dir
from orchestrator.model.impairment import Impairment, load_impairment
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.model.yamlfile import describe_validation_error
from orchestrator.results.atomic import read_json, write_json_atomic, write_text_atomic

SERVICES_FOR_RUN = ("broker", "capture", "subscriber", "publisher")


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # ok | failed | interrupted
    received: int
    error: str | None
    metrics: dict[str, Any] | None


def make_spec(**fields: Any) -> RunSpec:
    """A RunSpec from user input; pydantic errors become one TestbedError naming the fields."""
    try:
        return RunSpec(**fields)
    except ValidationError as exc:
        raise TestbedError("invalid run parameters", evidence=describe_validation_error(exc, "run")) from exc


def check_publisher_can_speak(scenario: Scenario, spec: RunSpec) -> None:
    if scenario.tls is not None and scenario.tls.client_version == "1.3":
        raise TestbedError(
            f"scenario {scenario.name} needs TLS 1.3, but the {spec.publisher} ESP32's mbedTLS 2.28 speaks "
            "TLS 1.2 only", hint="use a TLS 1.2 scenario (tls, tls-aes128gcm) with the ESP32 publisher")


def preflight(scenario: Scenario, spec: RunSpec) -> Impairment:
    """Everything that can be checked before a container starts; the run's impairment profile."""
    check_publisher_can_speak(scenario, spec)
    impairment = load_impairment(spec.impairment)
    check_supported(impairment)  # e.g. a delay profile on a kernel without netem fails here
    if spec.publisher != "virtual":
        raise TestbedError("--publisher esp32 is not wired into `testbed run` yet",
                           hint="flash the board with `testbed firmware upload` and use `testbed up --expose`")
    if which("tshark") is None:
        raise TestbedError("tshark is missing on this host (the analysis needs it)",
                           hint="apt-get install -y tshark")
    docker_engine.engine_version()
    docker_engine.compose_command()
    missing = missing_images(SERVICES_FOR_RUN)
    if missing:
        raise TestbedError(f"images not built: {', '.join(missing)}", hint="testbed images build")
    return impairment


def impairment_targets(impairment: Impairment) -> list[ImpairmentTarget]:
    """Where the profile acts: the publisher's link, the broker->subscriber link, or both."""
    names = {role: compose.container_name(role) for role in ("publisher", "broker", "subscriber")}
    return targets_for_containers(impairment.direction, names)


@contextmanager
def impairment_applied(impairment: Impairment, run_dir: Path) -> Iterator[None]:
    """Apply the profile for the block and ALWAYS clear it; tc/nft state before, during and after is
    written to impairment.json in the run folder."""
    record_path = run_dir / "impairment.json"
    if impairment.is_noop:
        write_json_atomic(record_path, {"profile": impairment.name, "applied": False,
                                        "note": "no impairment: nothing applied, nothing to clear"})
        yield
        return
    targets = impairment_targets(impairment)
    with impaired(impairment, targets) as record:
        write_json_atomic(record_path, {"profile": impairment.name, "applied": True,
                                        **record.model_dump(mode="json")})
        yield
    write_json_atomic(record_path, {"profile": impairment.name, "applied": True,
                                    "dropped_packets": dropped_packets(record.before_clear or ""),
                                    **record.model_dump(mode="json")})


def publisher_args(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec) -> list[str]:
    args = ["--host", "broker", "--port", str(scenario.port),
            "--transport", "tls" if scenario.is_tls else "plain",
            "--payload", str(spec.payload), "--samples", str(spec.samples),
            "--interval-ms", f"{spec.interval_ms:g}", "--qos", str(spec.qos), "--seed", str(spec.seed),
            "--device-id", spec.device_id, "--client-id", "testbed-publisher",
            "--send-log", lay.in_container(lay.publisher_log),
            "--summary", lay.in_container(lay.publisher_summary)]
    if scenario.tls is not None:
        args += ["--ciphers", ",".join(scenario.client_cipher_iana()),
                 "--ca", lay.in_container(lay.pki / "ca.crt"), "--server-name", "broker",
                 "--keylog", lay.in_container(lay.keylogs / "publisher.keys")]
        if scenario.tls.client_auth == "certificate":
            args += ["--cert", lay.in_container(lay.pki / "publisher.crt"),
                     "--key", lay.in_container(lay.pki / "publisher.key")]
    if pki is not None and not scenario.anonymous and (scenario.tls is None
                                                        or scenario.tls.client_auth == "password"):
        args += ["--username", "publisher", "--password", pki.password_for("publisher")]
    return args


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _publisher_error(lay: Layout) -> str:
    summary = read_json(lay.publisher_summary)
    errors = summary.get("errors") if summary else None
    if errors:
        return "; ".join(str(e) for e in errors)
    lines = [ln for ln in compose.logs(["publisher"], tail=20).splitlines() if ln.strip()]
    return lines[-1] if lines else "publisher exited with an error and printed nothing"


def execute_run(spec: RunSpec, run_dir: Path, *, cell: dict[str, Any] | None = None,
                progress: Callable[[int, int], None] = lambda _n, _t: None,
                status: Callable[[str], None] = lambda _m: None, analyse: bool = True) -> RunOutcome:
    """One run into ``run_dir``. Raises TestbedError for setup failures; a run that started and failed
    returns status 'failed' with its logs kept; KeyboardInterrupt is re-raised after cleanup."""
    scenario = load_scenario(spec.scenario)
    impairment = preflight(scenario, spec)
    run_dir.mkdir(parents=True, exist_ok=True)
    cell_info: dict[str, Any] = {
        "cell_id": run_dir.name, "scenario": scenario.name, "payload": spec.payload,
        "impairment": spec.impairment, "repeat": 1, **(cell or {}),
        "spec": spec.model_dump(), "status": "running", "error": None, "started_utc": utc_now()}
    write_json_atomic(run_dir / "cell.json", cell_info)
    received = 0
    pub_code: int | None = None
    resources: dict[str, Any] = {}
    timings: dict[str, float] = {}
    mark = [time.monotonic()]

    def lap(name: str) -> None:
        now = time.monotonic()
        timings[f"{name}_s"] = round(now - mark[0], 3)
        mark[0] = now

    cell_info["timings"] = timings
    try:
        status(f"{cell_info['cell_id']}: starting broker, capture and subscriber")
        with running_lab(scenario, run_dir, qos=spec.qos) as (lay, pki, topo):
            lap("up")
            pub_topo = replace(topo, publisher_args=publisher_args(scenario, lay, pki, spec))
            sampler = StatsSampler(compose.container_name("broker")).start()
            status(f"{cell_info['cell_id']}: publishing {spec.samples} x {spec.payload} B")
            compose.start_service(pub_topo, "publisher")
            lap("publisher_start")

            def something_died() -> bool:
                state, code = compose.container_state("publisher")
                if state == "exited" and code not in (0, None):
                    return True
                return compose.container_state("broker")[0] != "running"

            with impairment_applied(impairment, run_dir):
                lap("impair")
                lay.publisher_go.touch()
                received = _wait_counting(lay, spec, progress, something_died)
                lap("publish")
                broker_state = compose.container_state("broker")
                pub_code = _wait_publisher_exit(timeout_s=15 if received >= spec.samples else 2)
                time.sleep(0.3)  # let the last segments (ACKs, DISCONNECT) reach the capture
                resources = sampler.stop()
                if compose.container_state("capture")[0] == "running":
                    compose.signal_service("capture", "SIGINT")
                    compose.wait_service_exit("capture", timeout_s=20)
            cell_info["impairment_state"] = read_json(run_dir / "impairment.json")
            write_text_atomic(lay.logs / "publisher.stdout", compose.logs(["publisher"], tail=100000) + "\n")
            pub_error = _publisher_error(lay) if pub_code not in (0,) else None
            if broker_state[0] != "running":
                pub_error = (f"the broker container stopped mid-run ({broker_state[0]}, exit code "
                             f"{broker_state[1]}); publisher: {pub_error or 'ok'}")
            lap("stop")
        lap("teardown")
        if pub_error is not None or received < spec.samples:
            error = pub_error or (f"only {received} of {spec.samples} messages arrived within "
                                  f"{spec.timeout_s():.0f} s")
            cell_info.update(status="failed", error=error)
        else:
            cell_info.update(status="ok")
    except KeyboardInterrupt:
        cell_info.update(status="interrupted", error="interrupted by the user (SIGINT)", finished_utc=utc_now())
        write_json_atomic(run_dir / "cell.json", cell_info)
        raise
    except TestbedError as exc:
        cell_info.update(status="failed", error=exc.message, finished_utc=utc_now())
        write_json_atomic(run_dir / "cell.json", cell_info)
        raise
    metrics = None
    if analyse and Layout(run_dir).capture.exists():
        status(f"{cell_info['cell_id']}: analysing the capture")
        try:
            metrics = analyse_run_dir(run_dir, scenario, spec, resources)
            lap("analysis")
        except TestbedError as exc:
            if cell_info["status"] == "ok":
                cell_info.update(status="failed", error=f"analysis: {exc.message}")
            else:
                cell_info.setdefault("warnings", []).append(f"analysis: {exc.message}")
    cell_info.update(received=received, publisher_exit_code=pub_code, finished_utc=utc_now())
    write_json_atomic(run_dir / "cell.json", cell_info)
    return RunOutcome(run_dir, cell_info["status"], received, cell_info["error"], metrics)


def _wait_counting(lay: Layout, spec: RunSpec, progress: Callable[[int, int], None],
                   publisher_failed: Callable[[], bool]) -> int:
    last_check = [0.0]

    def stop_early() -> bool:
        now = time.monotonic()
        if now - last_check[0] < 1.0:
            return False
        last_check[0] = now
        return publisher_failed()

    n = wait_for_messages(lay, spec.samples, spec.timeout_s(), lambda k: progress(k, spec.samples), stop_early)
    progress(n, spec.samples)
    return n


def _wait_publisher_exit(timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while True:
        state, code = compose.container_state("publisher")
        if state == "exited":
            return code
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
