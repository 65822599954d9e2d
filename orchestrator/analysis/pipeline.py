"""One run's files -> per-packet table, per-message table, metrics -> per_message.csv, packets.csv, metrics.json."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis import exchange, handshake, metrics, tlsrecords
from orchestrator.analysis.csvout import csv_chunks
from orchestrator.analysis.exchange import EXCHANGE_ONLY
from orchestrator.analysis.fields import (
    Columns,
    ExportOutcome,
    ExportRequest,
    FieldExporter,
    compact,
    concat_tables,
    own_columns,
    parse_fields,
)
from orchestrator.analysis.keying import ONE_DEVICE, Keying
from orchestrator.analysis.logs import read_subscriber_log
from orchestrator.analysis.memory import give_back_freed_memory
from orchestrator.analysis.messages import PUBLISH, explode_mqtt, per_message_table
from orchestrator.analysis.nokeys import order_matched_publish
from orchestrator.analysis.pcapfile import capture_format, scan_capture
from orchestrator.errors import TestbedError
from orchestrator.model.layout import SCHEMA_VERSIONS, Layout
from orchestrator.results.atomic import write_chunks_atomic, write_text_atomic

SCHEMA_VERSION = SCHEMA_VERSIONS["metrics"]
ANALYSIS_VERSION = "1.0"
# what is read of the MQTT message table once its PUBLISH are taken out (handshake.sessions, the count)
MESSAGE_COLUMNS_KEPT = ("frame", "time", "stream", "src_port", "dst_port", "mqtt_type")


@dataclass(frozen=True)
class RunInputs:
    """Everything one run's analysis reads. Logs are optional (a real ESP32 keeps no send log).

    ``keying`` (analysis/keying.py, from the run's publisher variant): how messages are keyed and which send
    logs name them; a fleet's: ``samples_expected`` is per device, messages are keyed by (device, seq), and the
    send logs are the per-device CSVs in its ``fleet_dir`` (logs/fleet).
    """

    pcap: Path
    broker_port: int
    tls: bool
    samples_expected: int
    payload_bytes: int
    keylogs: Sequence[Path] = ()
    publisher_log: Path | None = None
    subscriber_log: Path | None = None
    expected_tls: tuple[str, int] | None = None  # e.g. ("TLS 1.2", 0xCCA9)
    clocks_shared: bool = True  # False: publisher and subscriber clocks unrelated -> no delay figures
    keying: Keying = ONE_DEVICE  # one device (by seq) or a fleet (by device and seq; its send-log folder)
    websocket: bool = False  # MQTT over WebSocket (the cell's transport): its packets inside WebSocket frames

    def __post_init__(self) -> None:
        if not 0 < self.broker_port < 65536:
            raise TestbedError(f"broker_port: {self.broker_port} is not a TCP port")
        if self.samples_expected < 1:
            raise TestbedError(f"samples_expected: must be >= 1, got {self.samples_expected}")
        if self.payload_bytes < 1:
            raise TestbedError(f"payload_bytes: must be >= 1, got {self.payload_bytes}")
        if self.devices < 1:
            raise TestbedError(f"devices: must be >= 1, got {self.devices}")

    @property
    def devices(self) -> int:
        """A fleet's size (1: the classic single device)."""
        return self.keying.devices

    @property
    def fleet_dir(self) -> Path | None:
        """A fleet's send logs, <device>.csv (read instead of publisher_log)."""
        return self.keying.fleet_dir

    @property
    def keys(self) -> tuple[str, ...]:
        """A message's key: seq, or (device, seq) in a fleet."""
        return self.keying.keys

    @property
    def messages_expected(self) -> int:
        return self.samples_expected * self.devices

    def export_request(self) -> ExportRequest:
        """The one export pass over this run's capture."""
        return ExportRequest(self.pcap, self.broker_port, self.tls, tuple(self.keylogs), websocket=self.websocket)


@dataclass
class RunAnalysis:
    per_packet: pd.DataFrame
    per_message: pd.DataFrame
    metrics: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    send_log: pd.DataFrame | None = None  # the publisher's send log as read (a fleet's: device, t_intended_us)
    mqtt_packets: exchange.ExchangePackets = field(default_factory=exchange.ExchangePackets)  # for the exchanges


def _norm_version(v: str) -> str:
    v = v.strip()
    return v if v.upper().startswith("TLS") else f"TLS {v}"


def check_negotiated(sessions: list[dict[str, Any]], expected: tuple[str, int], port: int) -> None:
    """Every TLS session on the broker port must have negotiated the expected version and suite."""
    want_v, want_s = _norm_version(expected[0]), expected[1]
    want = f"{want_v} {handshake.suite_fields(want_s)['cipher_suite'] or ''} (0x{want_s:04x})"
    seen = [s for s in sessions if s["cipher_suite_id"] is not None]
    if not seen:
        raise TestbedError(f"no TLS ServerHello on port {port} in the capture: cannot verify the negotiated "
                           f"suite (expected {want})",
                           hint="the capture must start before the clients connect")
    for s in seen:
        if s["version"] != want_v or int(s["cipher_suite_id"], 16) != want_s:
            got = f"{s['version']} {s['cipher_suite'] or ''} ({s['cipher_suite_id']})"
            raise TestbedError(
                f"negotiated TLS differs from the scenario: session from {s['client_ip']}:{s['client_port']} "
                f"to port {port} got {got}, expected {want}",
                hint="check the broker's `ciphers` / `ciphers_tls1.3` / version cap and the clients' "
                     "cipher lists",
                evidence="\n".join(f"stream {x['stream']}: {x['version']} {x['cipher_suite_id']}"
                                   for x in seen))


def _select_publish(msgs: pd.DataFrame, inputs: RunInputs, warnings: list[str]) -> tuple[pd.DataFrame, ...]:
    # Messages in retransmitted frames are kept: tshark dissects a retransmission only when it fills
    # a gap (its data seen nowhere else); a copy of data already seen stays undissected.
    pub = (msgs["mqtt_type"] == PUBLISH).fillna(False).to_numpy(dtype=bool)
    port = inputs.broker_port
    inbound = pub & (msgs["dst_port"] == port).to_numpy()
    outbound = pub & (msgs["src_port"] == port).to_numpy()
    sized = (msgs["payload_len"] == inputs.payload_bytes).fillna(False).to_numpy(dtype=bool)
    other = int(inbound.sum() + outbound.sum() - (inbound & sized).sum() - (outbound & sized).sum())
    if other:
        warnings.append(f"{other} PUBLISH on port {port} with a payload other than {inputs.payload_bytes} B "
                        "ignored (another session in the same capture?)")
    return msgs[inbound & sized], msgs[outbound & sized]  # one copy each: no intermediate selections


def _mqtt_on_port(msgs: pd.DataFrame, port: int) -> bool:
    return bool(((msgs["dst_port"] == port) | (msgs["src_port"] == port)).any())


def _no_publish_error(msgs: pd.DataFrame, packets: pd.DataFrame, inputs: RunInputs) -> TestbedError:
    port = inputs.broker_port
    on_port = int(((packets["dst_port"] == port) | (packets["src_port"] == port)).sum())
    what = f"no MQTT PUBLISH of {inputs.payload_bytes} B on port {port} in {inputs.pcap}"
    if on_port == 0:
        return TestbedError(f"{what}: no packet at all on that port ({len(packets)} packets in the file)",
                            hint="wrong broker port, or the capture ran on another interface")
    if msgs.empty and inputs.tls:
        return TestbedError(f"{what}: {on_port} packets on the port but no MQTT decoded",
                            hint="TLS needs the clients' key logs (NSS format) to see MQTT inside; "
                                 "are they given and from this run?")
    if msgs.empty:
        return TestbedError(f"{what}: {on_port} packets on the port but no MQTT in them",
                            hint="is it really MQTT? is the --tls flag right?")
    return TestbedError(f"{what}: the MQTT seen there carries no PUBLISH of that size",
                        hint="check --payload and that the publisher ran")


def _legs(packets: pd.DataFrame, port: int, pub: set[int], sub: set[int]) -> pd.Categorical:
    to_b = (packets["dst_port"] == port).to_numpy()
    from_b = (packets["src_port"] == port).to_numpy()
    in_pub = packets["stream"].isin(pub).to_numpy()
    in_sub = packets["stream"].isin(sub).to_numpy()
    legs = ["publisher->broker", "broker->publisher", "subscriber->broker", "broker->subscriber"]
    code = np.select([in_pub & to_b, in_pub & from_b, in_sub & to_b, in_sub & from_b], [1, 2, 3, 4], 0)
    return pd.Categorical.from_codes(code, categories=["", *legs])


def _export_tables(inputs: RunInputs, exporter: FieldExporter,
                   mqtt_packets: exchange.ExchangePackets) -> tuple[pd.DataFrame, pd.DataFrame, ExportOutcome]:
    """The one export pass, parsed chunk by chunk while the exporter still runs (frames are independent); each
    chunk's MQTT packets are added to ``mqtt_packets`` (the exchanges', analysis/exchange.py).

    The exporter hands over whole lines as soon as it has them, so parsing here overlaps the
    exporting program's own work (it uses one core, parsing the other): this is what keeps the
    analysis close to a bare export.
    """
    packet_parts: list[Columns] = []
    msg_parts: list[Columns] = []
    payload_cache: dict[str, tuple[str, int, int] | None] = {}

    def handle(text: str) -> None:
        part = parse_fields(text)
        mqtt_packets.add(exchange.packets_of_table(part, inputs.broker_port))
        msg_parts.append(own_columns(explode_mqtt(part, payload_cache)))
        # the payloads are in msg_parts now, header flags and packet ids in mqtt_packets
        packet_parts.append(own_columns(compact(part, drop=["mqtt_msg", *EXCHANGE_ONLY])))

    outcome = exporter(inputs.export_request(), handle)
    if not packet_parts:
        handle("")
    packets = concat_tables(packet_parts)
    give_back_freed_memory()  # the parts' pages, before the next table takes new ones
    msgs = concat_tables(msg_parts, keep_empty=True)
    give_back_freed_memory()
    return packets, msgs, outcome


def _dissector_bugs(outcome: ExportOutcome) -> list[str]:
    """A warning when the exporter says it could not dissect some frame (its figures miss what it lost)."""
    bugs = [line.strip() for line in outcome.stderr.splitlines() if "Dissector bug" in line]
    if not bugs:
        return []
    return [f"tshark reported {len(bugs)} dissector error(s); what it could not decode is missing from the "
            f"tables (first: {bugs[0][:300]})"]


def _exported(inputs: RunInputs, exporter: FieldExporter, warnings: list[str],
              mqtt_packets: exchange.ExchangePackets) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The export pass's tables; an unreadable capture is a TestbedError saying what is wrong with the file."""
    packets, msgs, outcome = _export_tables(inputs, exporter, mqtt_packets)
    if outcome.returncode != 0 or packets.empty:
        # only now walk the record headers: say exactly what is wrong with the file
        scan = scan_capture(inputs.pcap)
        if scan.packets == 0:
            raise TestbedError(f"capture {inputs.pcap} holds no packet ({scan.fmt}, {scan.size_bytes} bytes: "
                               "header only)", hint="the capture stopped before any traffic, or ran on the "
                                                    "wrong interface")
        if outcome.returncode != 0 and not scan.truncated_bytes:
            raise outcome.error(inputs.pcap)
        if packets.empty:
            raise TestbedError(f"tshark read no packet from {inputs.pcap} ({scan.packets} records in it)")
        warnings.append(f"capture {inputs.pcap.name} is truncated: {scan.truncated_bytes} bytes after the "
                        f"last complete packet were cut; the {scan.packets} complete packets are used")
        if len(packets) != scan.packets:
            warnings.append(f"tshark read {len(packets)} packets, the record walk counted {scan.packets}")
    warnings.extend(_dissector_bugs(outcome))
    return packets, msgs


def analyse_run(inputs: RunInputs, exporter: FieldExporter) -> RunAnalysis:
    """Analyse one run, its capture exported by ``exporter`` (``backends.tshark.export_chunks``).

    The logs are read in a thread while the exporter runs (they do not depend on the capture; the
    exporter's own work leaves this process waiting most of that time). Raises TestbedError on input
    that cannot give honest figures (a capture's error first, as if the logs were read after it).
    """
    warnings: list[str] = []
    mqtt_packets = exchange.ExchangePackets()
    capture_format(inputs.pcap)  # empty or foreign file: a clear error before tshark runs
    with ThreadPoolExecutor(1, thread_name_prefix="analysis-logs") as pool:
        logs = pool.submit(_read_logs, inputs, [])
        packets, msgs = _exported(inputs, exporter, warnings, mqtt_packets)
        inbound, outbound, matched_by = _match_publish(msgs, packets, inputs, warnings)
        msgs = msgs[list(MESSAGE_COLUMNS_KEPT)]  # the rest (payloads, devices) is in inbound/outbound now
        give_back_freed_memory()
        unparsed = int(inbound["seq"].isna().sum() + outbound["seq"].isna().sum())
        if unparsed:
            warnings.append(f"{unparsed} PUBLISH payloads carry no readable sequence number: not matched to logs")
        pub_streams = {int(s) for s in inbound["stream"].unique()}
        sub_streams = {int(s) for s in outbound["stream"].unique()}
        packets["leg"] = _legs(packets, inputs.broker_port, pub_streams, sub_streams)
        tcp = metrics.retransmissions(packets, pub_streams | sub_streams, inputs.broker_port)  # its arrays before pm's
        pub_log, sub_log, log_warnings = logs.result()
    warnings = warnings + log_warnings
    pm = per_message_table(inbound, outbound, pub_log, sub_log, warnings, inputs.keys)
    give_back_freed_memory()
    m = _metrics(inputs, packets, msgs, inbound, outbound, pm, pub_log, sub_log, pub_streams, sub_streams,
                 warnings, tcp)
    m["capture"]["messages_matched_by"] = matched_by
    del msgs, inbound, outbound  # their pages given back before the exchanges and the writing take new ones
    give_back_freed_memory()
    return RunAnalysis(packets, pm, m, warnings, send_log=pub_log, mqtt_packets=mqtt_packets)


def _match_publish(msgs: pd.DataFrame, packets: pd.DataFrame, inputs: RunInputs,
                   warnings: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The run's PUBLISH on each leg of the broker, and how they were matched."""
    inbound, outbound = _select_publish(msgs, inputs, warnings)
    matched_by = inputs.keying.matched_by
    if inbound.empty and outbound.empty and inputs.tls and not _mqtt_on_port(msgs, inputs.broker_port):
        inputs.keying.without_keylog(inputs.pcap)
        inbound, outbound = order_matched_publish(packets, inputs.broker_port, inputs.payload_bytes,
                                                  inputs.samples_expected)
        if not inbound.empty:
            matched_by = "order within the TLS streams (no key log decrypts the capture)"
            warnings.append("no key log decrypts this capture: PUBLISH are taken as the TLS application "
                            "records of one size and matched BY ORDER (k-th record = seq k); a message lost "
                            "inside the broker shifts later matches; MQTT lengths and TLS overhead "
                            "unavailable")
    if inbound.empty and outbound.empty:
        raise _no_publish_error(msgs, packets, inputs)
    return inbound, outbound, matched_by


def _read_logs(inputs: RunInputs, warnings: list[str]) -> tuple[pd.DataFrame | None, pd.DataFrame | None,
                                                                list[str]]:
    """The send log(s) and the receive log; a fleet's send logs from ``fleet_dir``, and its receive log
    only when it names the device of each message."""
    pub_log = sub_log = None
    sent = inputs.keying.read_send_log(inputs.publisher_log)
    if sent is not None:
        pub_log, warnings = sent.frame, warnings + sent.warnings
    if inputs.subscriber_log is not None:
        t = read_subscriber_log(inputs.subscriber_log)
        sub_log, warnings = t.frame, warnings + t.warnings
    for name, log in (("send", pub_log), ("receive", sub_log)):
        refused = inputs.keying.refused(name, log)
        if refused is not None:
            warnings = [*warnings, refused]
            pub_log, sub_log = (None, sub_log) if name == "send" else (pub_log, None)
    return pub_log, sub_log, warnings


def _timing(inputs: RunInputs, pm: pd.DataFrame, pub_log: pd.DataFrame | None,
            warnings: list[str]) -> dict[str, Any]:
    """The delay_ms, broker_transit_ms, uplink_ms and jitter_ms blocks."""
    if not inputs.clocks_shared:
        delay = metrics.unavailable_stats("publisher and subscriber clocks are not shared or synchronised")
    elif pm["delay_ms"].notna().any():
        delay = metrics.describe(pm["delay_ms"])
        delay["t_send_source"] = "publisher log" if pub_log is not None else "payload"
    else:
        delay = metrics.unavailable_stats("no message has both a send and a receive time")
    if delay.get("negative_count"):
        warnings.append(f"{delay['negative_count']} negative one-way delays (receive before send): clocks "
                        "disagree; they are kept in the statistics")
    transit = metrics.describe(pm["broker_transit_ms"])
    if not transit["available"]:
        transit["reason"] = "no PUBLISH seen on both legs of the broker"
    jit = inputs.keying.jitter(pm) if delay["available"] else {"mean_abs_diff": None, "std": None, "n": 0}
    return {"delay_ms": delay, "broker_transit_ms": transit, "uplink_ms": _uplink(inputs, pm), "jitter_ms": jit}


def _uplink(inputs: RunInputs, pm: pd.DataFrame) -> dict[str, Any]:
    if not inputs.clocks_shared:
        return metrics.unavailable_stats("the publisher's and the capture's clocks are not shared or synchronised")
    up = metrics.describe(pm["uplink_ms"])
    if not up["available"]:
        return metrics.unavailable_stats("no PUBLISH has both a send time and a broker-side capture time")
    up["robust_spread"] = metrics.robust_spread(pm["uplink_ms"])
    return up


def _loss(inputs: RunInputs, inbound: pd.DataFrame, outbound: pd.DataFrame, pub_log: pd.DataFrame | None,
          sub_log: pd.DataFrame | None, tcp: dict[str, Any]) -> dict[str, Any]:
    keying = inputs.keying
    loss = keying.loss(sub_log, inputs.samples_expected, outbound)
    loss.update(tcp)
    loss["publisher_logged"] = keying.logged(pub_log)
    loss["captured_publisher_to_broker"] = keying.unique(inbound)
    loss["captured_broker_to_subscriber"] = keying.unique(outbound)
    return loss


def _inputs_block(inputs: RunInputs) -> dict[str, Any]:
    return {"samples_expected": inputs.samples_expected, "payload_bytes": inputs.payload_bytes,
            "broker_port": inputs.broker_port, "tls": inputs.tls, "pcap": inputs.pcap.name,
            "keylogs": [p.name for p in inputs.keylogs],
            "publisher_log": inputs.publisher_log.name if inputs.publisher_log else None,
            "subscriber_log": inputs.subscriber_log.name if inputs.subscriber_log else None,
            "expected_tls": ({"version": _norm_version(inputs.expected_tls[0]),
                              "cipher_suite_id": f"0x{inputs.expected_tls[1]:04x}"}
                             if inputs.expected_tls else None),
            "clocks_shared": inputs.clocks_shared,
            **inputs.keying.inputs_block(inputs.samples_expected)}


def _sessions_with_roles(packets: pd.DataFrame, msgs: pd.DataFrame, port: int, pub_streams: set[int],
                         sub_streams: set[int]) -> list[dict[str, Any]]:
    sessions = handshake.sessions(packets, msgs, port)
    for s in sessions:
        s["role"] = ("publisher" if s["stream"] in pub_streams else
                     "subscriber" if s["stream"] in sub_streams else "other")
    return sessions


def _metrics(inputs: RunInputs, packets: pd.DataFrame, msgs: pd.DataFrame, inbound: pd.DataFrame,
             outbound: pd.DataFrame, pm: pd.DataFrame, pub_log: pd.DataFrame | None,
             sub_log: pd.DataFrame | None, pub_streams: set[int], sub_streams: set[int],
             warnings: list[str], tcp: dict[str, Any]) -> dict[str, Any]:
    port = inputs.broker_port
    timing = _timing(inputs, pm, pub_log, warnings)
    loss = _loss(inputs, inbound, outbound, pub_log, sub_log, tcp)
    overhead, ow = metrics.overhead(inbound, inputs.tls)
    warnings.extend(ow)
    sessions = _sessions_with_roles(packets, msgs, port, pub_streams, sub_streams)
    pub_sessions = [s for s in sessions if s["role"] == "publisher"]
    hs = handshake.publisher_summary(pub_sessions)
    tls_block = handshake.tls_summary(sessions, pub_sessions, warnings)
    tlsrecords.add_split(overhead, inbound, tls_block)  # TLS 1.3 runs: header, type, tag, padding
    if inputs.tls and inputs.expected_tls is not None:
        check_negotiated(sessions, inputs.expected_tls, port)
    sent = len(pub_log) if pub_log is not None else inputs.messages_expected
    received_total = loss.get("received_total")
    return {
        "schema_version": SCHEMA_VERSION,
        "analysis_version": ANALYSIS_VERSION,
        "inputs": _inputs_block(inputs),
        "capture": {"packets": int(len(packets)), "mqtt_messages": int(len(msgs)),
                    "publish_publisher_to_broker": int(len(inbound)),
                    "publish_broker_to_subscriber": int(len(outbound)),
                    "publisher_streams": sorted(pub_streams), "subscriber_streams": sorted(sub_streams)},
        **timing,
        "throughput": metrics.throughput(packets, inbound, pub_streams, port),
        "loss": loss,
        "overhead_bytes": overhead,
        "handshake": hs,
        "tls": tls_block,
        "study_compatible": metrics.study_compatible(inbound, packets, pub_streams | sub_streams, sent,
                                                     received_total),
        "definitions": metrics.DEFINITIONS,
        "warnings": warnings,
    }


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set):
        return [_jsonable(v) for v in x]
    if x is None or x is pd.NA:
        return None
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        return None if math.isnan(x) or math.isinf(x) else float(x)
    return x


def metrics_json(m: dict[str, Any]) -> str:
    return json.dumps(_jsonable(m), indent=2, allow_nan=False) + "\n"


def write_run_outputs(analysis: RunAnalysis, out_dir: Path) -> dict[str, Path]:
    """per_message.csv, packets.csv and metrics.json in ``out_dir``, each replaced atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lay = Layout(out_dir)
    paths = {"per_message": lay.per_message, "packets": lay.packets, "metrics": lay.metrics}
    write_chunks_atomic(paths["per_message"], csv_chunks(analysis.per_message))
    write_chunks_atomic(paths["packets"], csv_chunks(analysis.per_packet))
    write_text_atomic(paths["metrics"], metrics_json(analysis.metrics))
    return paths
