"""Analyse one run folder from its raw files (capture, logs, key logs): after a run, and for `testbed report`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.analysis import brokercpu, handshakecost, lifecycle, tlsrecords
from orchestrator.analysis import metrics as run_metrics
from orchestrator.analysis.clock import one_way_delay_available
from orchestrator.analysis.connections import connections_table
from orchestrator.analysis.events import events_metrics, subscribes
from orchestrator.analysis.keying import Keying
from orchestrator.analysis.pipeline import RunAnalysis, RunInputs, analyse_run, write_run_outputs
from orchestrator.backends.tshark import export_chunks
from orchestrator.lab.broker import BROKER
from orchestrator.model.axes import PERSISTENT
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.publishers.variants import variant_for
from orchestrator.results.atomic import read_json, write_json_atomic
from orchestrator.runanalysis import exchanges

MoreMetrics = Callable[[dict[str, Any], pd.DataFrame, Layout], None]


def analyse_run_folder(run_dir: Path, scenario: Scenario, spec: RunSpec, resources: dict[str, Any] | None = None,
                       more: MoreMetrics | None = None) -> dict[str, Any]:
    """Analyse a run folder's raw files into its tables and metrics.json (after a run, and for `testbed report`).
    ``more``: what the run's site adds to the metrics (the packets table at hand) before they are written."""
    lay = Layout(run_dir)
    summary = read_json(lay.publisher_summary)
    board_clock = summary.get("clock") if summary and summary.get("simulated") is False else None
    keylogs = sorted(p for p in lay.keylogs.glob("*.keys") if p.stat().st_size > 0)
    keying = variant_for(spec).keying(spec, lay)
    analysis = analyse_run(run_inputs(lay, scenario, spec, keylogs, board_clock, keying), export_chunks)
    if spec.connection != PERSISTENT or spec.values().get("events"):
        add_connections(analysis, lay, scenario, spec, keylogs, keying)
    device = variant_for(spec).recorded(lay).get("device") or {}  # the device's own padding granularity
    tlsrecords.with_granularity(analysis.metrics, device.get("tls13_padding_granularity"), "the device's summary")
    exchanges.add_exchanges(analysis, lay)  # each message's exchange (runanalysis/exchanges.py)
    if board_clock is not None:
        analysis.metrics["clock"] = with_delay_verdict(analysis.metrics, board_clock, summary.get("puback_rtt_ms"))
    res = dict(analysis.metrics.get("resources") or {})
    if resources:
        res.update(resources)
    elif lay.resources.exists():
        res.update(read_json(lay.resources))
    series = {"cgroup": res.pop("broker_cpu_series", None),  # resources.json keeps them; metrics.json
              "process": res.pop("broker_process_cpu_series", None)}  # gets the figures
    memory = {"cgroup": res.pop("broker_mem_series", None), "process": res.pop("broker_process_rss_series", None)}
    if series["cgroup"] or series["process"]:
        analysis.metrics["broker_cpu"] = broker_cpu(series, analysis, lay, spec)
    events = (read_json(lay.cell) or {}).get("events") if spec.values().get("events") else None
    if events and lay.connections.exists():  # a cell with --events (issue 27): its recovery from the capture
        analysis.metrics["events"] = events_metrics(events, pd.read_csv(lay.connections), analysis.per_message,
                                                    events_cpu(series), subscribes(analysis.per_packet),
                                                    _text(lay.container_log(BROKER.service)))
    summary = keying.add_tables(analysis, lay, spec.samples, res, series, memory, summary)
    if summary:
        res["publisher_cpu_s"] = (summary.get("cpu_user_s") or 0) + (summary.get("cpu_sys_s") or 0)
        res["publisher_max_rss_kb"] = summary.get("max_rss_kb")
        res["publisher_handshake_ms"] = summary.get("handshake_ms")
        res["publisher_simulated_sensors"] = summary.get("simulated")
    analysis.metrics["resources"] = res
    if resources:
        write_json_atomic(lay.resources, resources)
    if more is not None:
        more(analysis.metrics, analysis.per_packet, lay)
    write_run_outputs(analysis, run_dir)
    return analysis.metrics


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
        keying=keying)


def add_connections(analysis: RunAnalysis, lay: Layout, scenario: Scenario, spec: RunSpec,
                    keylogs: list[Path], keying: Keying) -> None:
    """connections.csv and metrics.json ``connections``: the publisher's connections as the capture shows
    them, each device's numbered (its own claim of resumption checked against the wire; a disagreement is a
    warning)."""
    pk = analysis.per_packet
    up = pk[pk["leg"] == "publisher->broker"]
    ips = set(up["ip_src"].dropna().astype(str)) | set(up["ipv6_src"].dropna().astype(str))
    sub_streams = set(pk.loc[pk["leg"].isin(["subscriber->broker", "broker->subscriber"]), "stream"].astype(int))
    table = connections_table(lay.capture, scenario.port, scenario.is_tls, keylogs, export_chunks)
    rows, mismatches = lifecycle.with_claims(lifecycle.publisher_rows(table, ips - {""}, sub_streams),
                                             lifecycle.read_claims(lay.publisher_connections), keying.connections_by)
    readings = int(analysis.metrics.get("loss", {}).get("publisher_logged") or spec.samples)
    block = lifecycle.lifecycle(rows, mismatches, mode=spec.connection, per_connection=spec.per_connection,
                                close=spec.close, expected=spec.connections_expected, readings=readings,
                                tls=scenario.is_tls)
    rows.to_csv(lay.connections, index=False)
    analysis.metrics["connections"] = block
    warnings = lifecycle.mismatch_warnings(block)
    if block["missing"]:
        warnings.append(f"{block['missing']} of {block['expected']} expected connections are not on the capture")
    analysis.warnings.extend(warnings)
    if analysis.metrics.get("warnings") is not analysis.warnings:
        analysis.metrics.setdefault("warnings", []).extend(warnings)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def events_cpu(series: dict[str, list[list[float]] | None]) -> list[list[float]] | None:
    """The broker's CPU series for the events' timeline: the process's, unless a restart cut it short (its sampler
    follows one process), then the container's."""
    process, cgroup = series["process"] or [], series["cgroup"] or []
    return process if len(process) >= len(cgroup) - 2 else cgroup or None


def broker_cpu(series: dict[str, list[list[float]] | None], analysis: RunAnalysis, lay: Layout,
               spec: RunSpec) -> dict[str, Any]:
    """The broker's CPU per reading it received and, for a cell that reconnects, per connection and per
    handshake of each kind on the wire (analysis/handshakecost.py): of the Mosquitto process itself
    (``process``, where this host can read it) and of its container's cgroup (``cgroup``: with the
    healthcheck's execs in it; see backends/docker_stats.py)."""
    arrived = analysis.per_message["broker_in_us"].dropna().to_numpy(dtype=float) / 1e6
    syn = None
    kinds: dict[str, Any] = {}
    if spec.connection != PERSISTENT and lay.connections.exists():
        table = pd.read_csv(lay.connections, usecols=["syn_time", "handshake"]).dropna(subset=["syn_time"])
        syn = table["syn_time"].to_numpy(dtype=float)
        kinds = {str(k): part["syn_time"].to_numpy(dtype=float) for k, part in table.groupby("handshake")}
    out: dict[str, Any] = {}
    for source, samples in series.items():
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
