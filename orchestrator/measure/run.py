"""`testbed run`: one measurement, end to end, the cell's lifecycle written once.

checks before anything starts -> cell.json (the record, written at every step) -> the cell at its site
(measure/site.py: this host or a lab inventory's hosts) with its publisher variant (publishers/variants.py: the
virtual device, a fleet, a board), torn down before the site returns, also on Ctrl-C -> analysis (the site's
additions handed in) -> per_message.csv, packets.csv, metrics.json, cell.json in the run folder.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import TestbedError
from orchestrator.lab.brokerconf import broker_record
from orchestrator.lab.keptlab import KeptLab
from orchestrator.measure.cell import CellWriter, utc_now
from orchestrator.measure.site import Site, site_for
from orchestrator.model import rules
from orchestrator.model.axes import AXES
from orchestrator.model.brokers import broker_of
from orchestrator.model.cell import CellRecord
from orchestrator.model.impairment import Impairment
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec, effective_connection
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.publishers.variants import variant_for
from orchestrator.results.atomic import make_new_folder, remove_partial_writes
from orchestrator.runanalysis.analyse import analyse_run_folder
from orchestrator.signals import interrupted_by


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # ok | failed | interrupted
    received: int
    error: str | None
    metrics: dict[str, Any] | None
    # with execute_run's analyse_later: the analysis and the record's last save, still to run (they give the outcome
    # with the status after the analysis); the status above is the measurement's
    analysis: Callable[[], RunOutcome] | None = None


def default_run_dir(spec: RunSpec) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / "runs" / f"{stamp}-{spec.scenario.replace('/', '_')}-{spec.payload}B"


def new_run_dir(spec: RunSpec) -> Path:
    """A run folder of its own under results/runs/ (made now): two runs of one scenario and payload started in the
    same second get two folders (the second's name ends in -2), never one with their captures and key logs mixed."""
    return make_new_folder(default_run_dir(spec))


def check_publisher_can_speak(scenario: Scenario, spec: RunSpec) -> None:
    """The rules on the scenario itself (orchestrator/model/rules.py: the devices speak TLS 1.2, what RabbitMQ's TLS
    can express)."""
    try:
        rules.check_scenario(scenario, spec.values())
    except rules.RuleViolation as exc:
        hint = ("use a TLS 1.2 scenario (tls, tls-aes128gcm), or the virtual device on --device-stack mbedtls-3.6 for "
                "TLS 1.3") if exc.rule == "device-speaks-tls12" else "use --broker mosquitto for it (docs/rabbitmq.md)"
        raise TestbedError(str(exc), hint=hint) from None


def preflight(scenario: Scenario, spec: RunSpec) -> Impairment:
    """Everything that can be checked before anything starts (at the run's site, for its publisher); the run's
    impairment profile."""
    check_publisher_can_speak(scenario, spec)
    return site_for(spec.inventory).preflight(spec, variant_for(spec))


def execute_run(spec: RunSpec, run_dir: Path | None, *, cell: dict[str, Any] | None = None,
                progress: Callable[[int, int], None] = lambda _n, _t: None,
                status: Callable[[str], None] = lambda _m: None, analyse: bool = True,
                lab: KeptLab | None = None, analyse_later: bool = False) -> RunOutcome:
    """One run into ``run_dir`` (None: a new folder of its own, new_run_dir, made once the checks passed). Raises
    TestbedError for setup failures; a run that started and failed returns status 'failed' with its logs kept;
    KeyboardInterrupt is re-raised after cleanup. ``lab``: a sweep block's kept-up lab the cell runs in
    (measure/sweep.py). ``analyse_later``: return once the measurement has ended and its lab share is torn down, the
    analysis in the outcome's ``analysis`` (a sweep runs it while the next cell's lab gets ready)."""
    scenario = load_scenario(spec.scenario)
    site = site_for(spec.inventory)
    impairment = preflight(scenario, spec)
    run_dir = new_run_dir(spec) if run_dir is None else run_dir
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
    build = broker_of(spec.values())  # another than the default broker: which, and its listener (a websocket cell's)
    if build.name != "mosquitto":
        record.set(broker=broker_record(build))
    elif spec.qos > 0 or AXES.value(spec.values(), "session") == "persistent":  # what the broker keeps of a session
        record.set(broker=broker_record())
    record.save()
    try:
        variant = variant_for(spec)
        seen = site.measure(scenario, spec, variant, impairment, record, progress, status, lab)
        record.set(**variant.recorded(Layout(run_dir)))
    except KeyboardInterrupt as exc:
        with suppress(TestbedError):  # a full disk cannot take the record: the interrupt is still what happened
            record.save(status="interrupted", error=interrupted_by(exc), finished_utc=utc_now())
        raise
    except TestbedError as exc:
        record.save(status="failed", error=exc.message, finished_utc=utc_now())
        raise
    finally:
        remove_partial_writes(run_dir)  # the clients' unfinished writes (a full disk, a killed container)
    record.record.status, record.record.error = ("failed" if seen.error else "ok"), seen.error

    def finish() -> RunOutcome:
        metrics = record_analysis(record, scenario, spec, seen.resources, status, site) if analyse else None
        record.save(received=seen.received, publisher_exit_code=seen.publisher_exit_code, finished_utc=utc_now())
        return RunOutcome(run_dir, record.record.status, seen.received, record.record.error, metrics)

    if analyse_later:
        return RunOutcome(run_dir, record.record.status, seen.received, record.record.error, None, analysis=finish)
    return finish()


def record_analysis(record: CellWriter, scenario: Scenario, spec: RunSpec, resources: dict[str, Any],
                    status: Callable[[str], None], site: Site) -> dict[str, Any] | None:
    """The run folder's analysis (metrics.json and the tables); its failure fails an ok cell in the record."""
    if not record.lay.capture.exists():
        return None
    status(f"{record.cell_id}: analysing the capture")
    try:
        metrics = analyse_run_folder(record.lay.root, scenario, spec, resources, more=site.more_metrics)
    except TestbedError as exc:
        if record.record.status == "ok":
            record.record.status, record.record.error = "failed", f"analysis: {exc.message}"
        else:
            record.warn(f"analysis: {exc.message}")
        return None
    record.lap("analysis")
    if isinstance(limited := (metrics.get("fleet") or {}).get("limited"), dict):
        record.set(limited=limited)  # a fleet's loader-limited / broker-limited verdicts (analysis/fleetlag.py)
    return metrics
