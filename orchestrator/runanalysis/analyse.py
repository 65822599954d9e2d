"""Analyse one run folder from its raw files (capture, logs, key logs): after a run, and for `testbed report`.

First the capture's tables and the metrics they give (analysis/pipeline.py analyse_run); then STEPS, in order: each
is what needs more of the run folder than the capture (the device's connections log, cell.json, the broker's stats
series, the publisher's summary), declared once with its name, its function, the files it reads, the metrics.json
key its result becomes, the files it writes and when it runs, and run by the one loop of analyse_run_folder. A new
metric that needs the run folder is one AnalysisStep here (its figures a pure function of analysis/) and its place
in the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis import brokercpu, device_phases, handshakecost, lifecycle, projection, tlsrecords
from orchestrator.analysis import metrics as run_metrics
from orchestrator.analysis.clock import one_way_delay_available
from orchestrator.analysis.connections import connections_table
from orchestrator.analysis.events import events_metrics, subscribes
from orchestrator.analysis.keying import Keying, Series
from orchestrator.analysis.pipeline import RunAnalysis, RunInputs, analyse_run, write_run_outputs
from orchestrator.backends.tshark import export_chunks
from orchestrator.lab.broker import BROKER
from orchestrator.model.axes import AXES, PERSISTENT
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.publishers.variants import variant_for
from orchestrator.results.atomic import read_json, write_json_atomic
from orchestrator.runanalysis.exchanges import write_exchanges

MoreMetrics = Callable[[dict[str, Any], pd.DataFrame, Layout], None]


@dataclass
class RunFolder:
    """What the steps read and share: the run folder, its scenario and spec, the capture's analysis, and the
    broker's resources as the steps fill them."""

    lay: Layout
    scenario: Scenario
    spec: RunSpec
    keylogs: list[Path]
    keying: Keying
    summary: dict[str, Any] | None  # the publisher's own summary (logs/publisher_summary.json)
    board_clock: dict[str, Any] | None  # a board's clock estimate: its summary's, when its sensors are not simulated
    analysis: RunAnalysis
    given: dict[str, Any] | None  # the resources the run measured (written to resources.json)
    resources: dict[str, Any]  # metrics.json ``resources``, filled by the steps
    cpu: dict[str, Series | None]  # the broker's CPU series: its container's (cgroup) and its process's
    memory: dict[str, Series | None]  # and its memory


def _always(run: RunFolder) -> bool:
    return True


@dataclass(frozen=True)
class AnalysisStep:
    """One step after the capture's tables: ``compute`` runs when ``when`` says so, and what it returns becomes
    metrics.json[``key``]; a step without a key returns nothing. ``reads`` and ``writes`` name run-folder files
    (Layout's attributes); ``amends``, the metrics.json keys it sets or changes itself."""

    name: str
    compute: Callable[[RunFolder], Any]
    reads: tuple[str, ...]
    key: str | None = None
    writes: tuple[str, ...] = ()
    amends: tuple[str, ...] = ()
    when: Callable[[RunFolder], bool] = _always


def analyse_run_folder(run_dir: Path, scenario: Scenario, spec: RunSpec, resources: dict[str, Any] | None = None,
                       more: MoreMetrics | None = None) -> dict[str, Any]:
    """Analyse a run folder's raw files into its tables and metrics.json (after a run, and for `testbed report`).
    ``resources``: what the run measured of the broker (else resources.json is read); ``more``: what the run's site
    adds to the metrics (the packets table at hand) before they are written."""
    run = open_run_folder(Layout(run_dir), scenario, spec, resources)
    for step in STEPS:
        if step.when(run):
            value = step.compute(run)
            if step.key is not None:
                run.analysis.metrics[step.key] = value
    if more is not None:
        more(run.analysis.metrics, run.analysis.per_packet, run.lay)
    write_run_outputs(run.analysis, run_dir)
    return run.analysis.metrics


def open_run_folder(lay: Layout, scenario: Scenario, spec: RunSpec, given: dict[str, Any] | None) -> RunFolder:
    """The run folder read and its capture analysed; the broker's resources gathered (given, or resources.json):
    its series apart, for the steps (resources.json keeps them; metrics.json gets the figures)."""
    summary = read_json(lay.publisher_summary)
    board_clock = summary.get("clock") if summary and summary.get("simulated") is False else None
    keylogs = sorted(p for p in lay.keylogs.glob("*.keys") if p.stat().st_size > 0)
    keying = variant_for(spec).keying(spec, lay)
    analysis = analyse_run(run_inputs(lay, scenario, spec, keylogs, board_clock, keying), export_chunks)
    res = dict(analysis.metrics.get("resources") or {})
    if given:
        res.update(given)
    elif lay.resources.exists():
        res.update(read_json(lay.resources))
    cpu = {"cgroup": res.pop("broker_cpu_series", None), "process": res.pop("broker_process_cpu_series", None)}
    memory = {"cgroup": res.pop("broker_mem_series", None), "process": res.pop("broker_process_rss_series", None)}
    return RunFolder(lay, scenario, spec, keylogs, keying, summary, board_clock, analysis, given, res, cpu, memory)


def run_inputs(lay: Layout, scenario: Scenario, spec: RunSpec, keylogs: list[Path],
               board_clock: dict[str, Any] | None, keying: Keying) -> RunInputs:
    """What the analysis reads of a run folder, its messages keyed as its publisher variant says (a fleet: its
    send logs in logs/fleet, no publisher.csv, samples per device, messages keyed by (device, seq))."""
    suite = scenario.expected_suite()
    return RunInputs(
        pcap=lay.capture, broker_port=scenario.port, tls=scenario.is_tls, samples_expected=spec.samples,
        payload_bytes=spec.payload, keylogs=keylogs,
        publisher_log=keying.classic_log(lay.publisher_log),
        subscriber_log=lay.subscriber_log if lay.subscriber_log.exists() else None,
        expected_tls=(f"TLS {suite.version}", suite.code) if suite else None,
        clocks_shared=board_clock is None or bool(board_clock.get("available")),
        keying=keying, websocket=AXES.value(spec.values(), "transport") == "websocket")


def events_cpu(series: dict[str, Series | None]) -> Series | None:
    """The broker's CPU series for the events' timeline: the process's, unless a restart cut it short (its sampler
    follows one process), then the container's."""
    process, cgroup = series["process"] or [], series["cgroup"] or []
    return process if len(process) >= len(cgroup) - 2 else cgroup or None


def broker_cpu(run: RunFolder) -> dict[str, Any]:
    """The broker's CPU per reading it received and, for a cell that reconnects, per connection and per
    handshake of each kind on the wire (analysis/handshakecost.py): of the Mosquitto process itself
    (``process``, where this host can read it) and of its container's cgroup (``cgroup``: with the
    healthcheck's execs in it; see backends/docker_stats.py)."""
    analysis, lay, spec = run.analysis, run.lay, run.spec
    arrived = analysis.per_message["broker_in_us"].dropna().to_numpy(dtype=float) / 1e6
    syn = None
    kinds: dict[str, Any] = {}
    if spec.connection != PERSISTENT and lay.connections.exists():
        table = pd.read_csv(lay.connections, usecols=["syn_time", "handshake"]).dropna(subset=["syn_time"])
        syn = table["syn_time"].to_numpy(dtype=float)
        kinds = {str(k): part["syn_time"].to_numpy(dtype=float) for k, part in table.groupby("handshake")}
    out: dict[str, Any] = {}
    for source, samples in run.cpu.items():
        if not samples:
            out[source] = None
            continue
        out[source] = {"per_reading": brokercpu.per_event(samples, arrived, what="reading")}
        if syn is not None:
            out[source]["per_connection"] = brokercpu.per_event(samples, syn, what="connection")
            out[source]["per_handshake_kind"] = handshakecost.per_kind(samples, kinds, arrived)
    return out


def with_delay_verdict(metrics: dict[str, Any], board_clock: dict[str, Any],
                       puback_rtt_ms: dict[str, Any] | None = None) -> dict[str, Any]:
    """A board's clock estimate in metrics.json, and whether its bound allows one-way delay: the uplink's
    median against the bound (analysis/clock.py's rule); when it does not, the delay and uplink figures
    are withdrawn with the reason. Whenever one-way delay is not available, the block carries the
    board's PUBACK round trip instead (``puback_rtt_ms`` of the publisher summary; None without QoS 1)."""
    out = dict(board_clock)
    uplink = metrics.get("uplink_ms") or {}
    if not board_clock.get("available") or not uplink.get("available"):
        out["puback_rtt_ms"] = puback_rtt_ms
        return out
    verdict = one_way_delay_available(float(board_clock["bound_us"]), float(uplink["median"]) * 1000)
    out["one_way_delay"] = {"available": verdict.available, "reason": verdict.reason}
    if not verdict.available:
        out["puback_rtt_ms"] = puback_rtt_ms
        for key in ("delay_ms", "uplink_ms"):
            metrics[key] = run_metrics.unavailable_stats(verdict.reason)
    return out


# The steps, in the order they run (metrics.json keeps its keys in this order).
def reconnects(run: RunFolder) -> bool:
    return run.spec.connection != PERSISTENT or bool(run.spec.values().get("events"))


def connections_of(run: RunFolder) -> dict[str, Any]:
    """connections.csv and metrics.json ``connections``: the publisher's connections as the capture shows them,
    each device's numbered (its own claim of resumption checked against the wire; a disagreement is a warning)."""
    analysis, lay, spec, scenario = run.analysis, run.lay, run.spec, run.scenario
    pk = analysis.per_packet
    up = pk[pk["leg"] == "publisher->broker"]
    ips = set(up["ip_src"].dropna().astype(str)) | set(up["ipv6_src"].dropna().astype(str))
    sub_streams = set(pk.loc[pk["leg"].isin(["subscriber->broker", "broker->subscriber"]), "stream"].astype(int))
    table = connections_table(lay.capture, scenario.port, scenario.is_tls, run.keylogs, export_chunks,
                              websocket=AXES.value(spec.values(), "transport") == "websocket")
    claims = lifecycle.read_claims(lay.publisher_connections)
    rows, mismatches = lifecycle.with_claims(lifecycle.publisher_rows(table, ips - {""}, sub_streams), claims,
                                             run.keying.connections_by)
    readings = int(analysis.metrics.get("loss", {}).get("publisher_logged") or spec.samples)
    block = lifecycle.lifecycle(rows, mismatches, mode=spec.connection, per_connection=spec.per_connection,
                                close=spec.close, expected=spec.connections_expected, readings=readings,
                                tls=scenario.is_tls)
    own = run.summary or read_json(lay.fleet_dir / "summary.json")  # a fleet's is its loader's (every host's)
    phases = device_phases.phases_block(rows, claims, device_phases.clock_label(own), scenario.is_tls)
    if phases is not None:
        block["device_phases"] = phases
    if scenario.is_tls and len(rows):
        block["esp32_projection"] = esp32_projection(rows, scenario)
    rows.to_csv(lay.connections, index=False)
    warnings = lifecycle.mismatch_warnings(block) + device_phases.phase_warnings(phases)
    if block["missing"]:
        warnings.append(f"{block['missing']} of {block['expected']} expected connections are not on the capture")
    warnings += lifecycle.attribution_warnings(rows, run.keying.connections_by)
    analysis.warnings.extend(warnings)
    if analysis.metrics.get("warnings") is not analysis.warnings:
        analysis.metrics.setdefault("warnings", []).extend(warnings)
    return block


def esp32_projection(rows: pd.DataFrame, scenario: Scenario) -> dict[str, Any]:
    """metrics.json ``connections.esp32_projection`` (analysis/projection.py): each handshake kind of the cell,
    projected on an ESP32 from the table TESTBED_ESP32_OPS_TABLE names, or the one shipped."""
    given = os.environ.get(projection.TABLE_ENV)
    table = projection.load_ops_table(Path(given) if given else None)
    wire = rows.assign(wire_bytes=rows["wire_client_to_server"] + rows["wire_server_to_client"])
    keys = ["tls_version", "cipher_suite_id", "handshake"]
    kinds = wire.dropna(subset=keys).groupby(keys, sort=True)["wire_bytes"].median().reset_index()
    client_cert = bool(scenario.tls and scenario.tls.client_auth == "certificate")
    return projection.projection_block(kinds.to_dict("records"), table, client_cert)


def device_padding(run: RunFolder) -> None:
    """The device's own TLS 1.3 padding granularity (its summary's) in metrics.json's record split."""
    device = variant_for(run.spec).recorded(run.lay).get("device") or {}
    tlsrecords.with_granularity(run.analysis.metrics, device.get("tls13_padding_granularity"), "the device's summary")


def exchanges_of(run: RunFolder) -> dict[str, Any]:
    """exchanges.csv and metrics.json ``exchanges``: each message's exchange (runanalysis/exchanges.py)."""
    return write_exchanges(run.analysis, run.lay)


def on_a_board(run: RunFolder) -> bool:
    return run.board_clock is not None


def clock_of(run: RunFolder) -> dict[str, Any]:
    assert run.board_clock is not None  # when=on_a_board
    return with_delay_verdict(run.analysis.metrics, run.board_clock, (run.summary or {}).get("puback_rtt_ms"))


def cpu_sampled(run: RunFolder) -> bool:
    return bool(run.cpu["cgroup"] or run.cpu["process"])


def cell_events(run: RunFolder) -> list[dict[str, Any]] | None:
    """The events the cell ran, as cell.json recorded them (a cell with --events)."""
    return (read_json(run.lay.cell) or {}).get("events") if run.spec.values().get("events") else None


def ran_events(run: RunFolder) -> bool:
    return bool(cell_events(run)) and run.lay.connections.exists()


def events_of(run: RunFolder) -> dict[str, Any]:
    """What each event cost (issue 27), from the capture (analysis/events.py)."""
    broker_log = run.lay.container_log(BROKER.service)
    return events_metrics(cell_events(run) or [], pd.read_csv(run.lay.connections), run.analysis.per_message,
                          events_cpu(run.cpu), subscribes(run.analysis.per_packet),
                          broker_log.read_text(errors="replace") if broker_log.exists() else "")


def publisher_tables(run: RunFolder) -> None:
    """The publisher variant's own tables (a fleet: devices.csv and metrics.json ``fleet``); the summary the
    resources take the publisher's figures from (a fleet: its loader's)."""
    run.summary = run.keying.add_tables(run.analysis, run.lay, run.spec.samples, run.resources, run.cpu,
                                        run.memory, run.summary or {})


def resources_of(run: RunFolder) -> dict[str, Any]:
    """metrics.json ``resources``: the broker's figures and the publisher's own; resources.json when the run
    measured them."""
    res, summary = run.resources, run.summary
    if summary:
        res["publisher_cpu_s"] = (summary.get("cpu_user_s") or 0) + (summary.get("cpu_sys_s") or 0)
        res["publisher_max_rss_kb"] = summary.get("max_rss_kb")
        res["publisher_handshake_ms"] = summary.get("handshake_ms")
        res["publisher_simulated_sensors"] = summary.get("simulated")
    if run.given:
        write_json_atomic(run.lay.resources, run.given)
    return res


STEPS: tuple[AnalysisStep, ...] = (
    AnalysisStep("connections", connections_of,
                 reads=("capture", "keylogs", "publisher_connections", "publisher_summary", "fleet_dir"),
                 key="connections", writes=("connections",), amends=("warnings",), when=reconnects),
    AnalysisStep("device padding", device_padding, reads=("publisher_summary", "fleet_dir"),
                 amends=("overhead_bytes",)),
    AnalysisStep("exchanges", exchanges_of, reads=("publisher_log",), key="exchanges", writes=("exchanges",)),
    AnalysisStep("clock", clock_of, reads=("publisher_summary",), key="clock", amends=("delay_ms", "uplink_ms"),
                 when=on_a_board),
    AnalysisStep("broker CPU", broker_cpu, reads=("resources", "connections"), key="broker_cpu", when=cpu_sampled),
    AnalysisStep("events", events_of, reads=("cell", "connections", "container_log"), key="events",
                 when=ran_events),
    AnalysisStep("publisher's tables", publisher_tables, reads=("fleet_dir",), writes=("devices",),
                 amends=("fleet", "warnings")),
    AnalysisStep("resources", resources_of, reads=("resources", "publisher_summary"), key="resources",
                 writes=("resources",)),
)
