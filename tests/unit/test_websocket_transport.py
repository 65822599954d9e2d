"""The transport axis (issue 43): tcp or websocket, without Docker.

It keys the cell id (``-ws``; tcp adds nothing, so every cell id so far stays), names a condition of its own, is a
lab axis (a websocket cell's broker differs), reaches vdevice and the fleet as --mqtt-transport and the subscriber
as --transport; the board and a lab inventory are refused by named rules; a websocket cell's broker is Mosquitto
2.0.21 with a `protocol websockets` listener; tshark is told to find MQTT inside the WebSocket frames; the analysis
pairs each MQTT packet with its frame header (RFC 6455's sizes) and takes it out of the TLS overhead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import metrics
from orchestrator.analysis.messages import ws_header_lengths
from orchestrator.backends.tshark import WS_MQTT_LUA, decode_as_args, fields_argv
from orchestrator.lab.brokerconf import broker_record, render_mosquitto_conf
from orchestrator.model import brokers, rules
from orchestrator.model.axes import AXES
from orchestrator.model.export import ExportRequest
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers.virtual import publisher_args


def test_the_axis_keys_the_cell_id_only_when_websocket_and_is_a_lab_axis() -> None:
    axis = AXES["transport"]
    assert axis.choices == ("tcp", "websocket") and axis.default == "tcp"
    assert axis.sweep is not None and axis.sweep.name == "transports" and axis.sweep.lab
    plan = SweepPlan(scenarios=["plain", "tls"], payloads=[200], transports=["tcp", "websocket"])
    assert sorted(c.cell_id for c in plan.cells()) == ["plain-200B-none-r1", "plain-200B-none-ws-r1",
                                                       "tls-200B-none-r1", "tls-200B-none-ws-r1"]
    assert axis.word("websocket") == "websocket" and axis.word("tcp") == ""


def test_the_device_and_the_subscriber_are_told_only_for_websocket(tmp_path: Path) -> None:
    lay, scenario = Layout(tmp_path / "cell"), load_scenario("tls")
    ws = publisher_args(scenario, lay, None, RunSpec(scenario="tls", payload=200, transport="websocket"))
    assert ws[ws.index("--mqtt-transport") + 1] == "websocket"
    assert "--mqtt-transport" not in publisher_args(scenario, lay, None, RunSpec(scenario="tls", payload=200))
    sub = RunSpec(scenario="tls", transport="websocket").subscription
    assert sub.websocket and sub.argv()[-2:] == ["--transport", "websocket"]
    assert "--transport" not in RunSpec(scenario="tls").subscription.argv()


def test_the_board_and_a_lab_inventory_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"rule websocket-client-is-the-virtual-devices"):
        RunSpec(scenario="tls", publisher="esp32", serial_port="/dev/ttyUSB0", transport="websocket")
    with pytest.raises(ValueError, match=r"rule websocket-needs-a-broker-that-speaks-it"):
        RunSpec(scenario="tls", inventory="/x/lab.yml", transport="websocket")
    assert RunSpec(scenario="tls", devices=20, transport="websocket").transport == "websocket"


def test_a_broker_without_websockets_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule reads the cell's broker build: today a websocket cell's is always 2.0.21; were it 2.0.11 (a broker
    axis's value), it is refused."""
    assert brokers.broker_of({"transport": "websocket"}).name == "mosquitto-2.0.21"
    assert brokers.broker_of({}).name == "mosquitto"
    monkeypatch.setattr(rules, "broker_of", lambda _v: brokers.BROKERS["mosquitto"])
    with pytest.raises(rules.RuleViolation, match=r"mosquitto \(2\.0\.11\) is built without websockets"):
        rules.check_rules(AXES, RunSpec(scenario="tls", transport="tcp").values() | {"transport": "websocket"})


def test_the_broker_listener_speaks_websockets_with_the_scenario_tls() -> None:
    tls = load_scenario("tls")
    conf = render_mosquitto_conf(tls, websocket=True).splitlines()
    assert "protocol websockets" in conf and "protocol mqtt" not in conf
    assert f"listener {tls.port} 0.0.0.0" in conf and any(line.startswith("ciphers ") for line in conf)
    assert render_mosquitto_conf(tls).splitlines() == [("protocol mqtt" if line == "protocol websockets" else line)
                                                       for line in conf]
    record = broker_record(brokers.BROKERS["mosquitto-2.0.21"])
    assert record["listener"] == "websockets" and record["permessage_deflate"] is False
    assert record["image"] == "broker-mosquitto-2.0.21" and record["version"] == "2.0.21"


def test_tshark_reads_mqtt_inside_the_frames() -> None:
    assert decode_as_args(1883, False, websocket=True) == ["-d", "tcp.port==1883,http"]
    assert decode_as_args(8883, True, websocket=True) == ["-d", "tcp.port==8883,tls", "-d", "tls.port==8883,http"]
    argv = fields_argv(ExportRequest(Path("x.pcapng"), 8883, True, websocket=True), None)
    assert argv[argv.index("-X") + 1] == f"lua_script:{WS_MQTT_LUA}" and WS_MQTT_LUA.is_file()
    assert "-X" not in fields_argv(ExportRequest(Path("x.pcapng"), 8883, True), None)


def test_each_packet_gets_its_frame_header_rfc6455_sizes() -> None:
    """Frames as tshark exports them: a frame of two MQTT packets in two WebSocket frames is paired, one whose
    frame count differs from its packets' is not (NA), a frame without WebSocket has none."""
    m = pd.DataFrame({"ws_len7": ["24", "126", "2|4", "126", ""], "ws_mask": ["1", "1", "0|0", "0", ""]})
    got = ws_header_lengths(m, np.array([1, 1, 2, 2, 1]))
    assert got.tolist() == [6, 8, 2, 2, pd.NA, pd.NA, pd.NA]
    long = pd.DataFrame({"ws_len7": ["127"], "ws_mask": ["1"]})
    assert ws_header_lengths(long, np.array([1])).tolist() == [14]


def test_the_overhead_gives_websocket_its_own_layer_under_tls() -> None:
    n = 4
    inbound = pd.DataFrame({
        "msgs_in_frame": [1] * n, "tls_record_len": pd.array([246] * n, dtype="Int64"),
        "mqtt_len": pd.array([222] * n, dtype="Int64"), "ws_header_len": pd.array([8] * n, dtype="Int64"),
        "frame_len": [300] * n, "tcp_hdr_len": [32] * n, "tcp_len": [251] * n, "ip_hdr_len": [20] * n,
        "payload_len": pd.array([200] * n, dtype="Int64")})
    over, _ = metrics.overhead(inbound, tls=True)
    assert over["per_layer"]["websocket"] == 8 and over["per_layer"]["tls"] == 21
    assert over["tls_overhead_values"] == [21] and over["websocket_header_values"] == [8]
    plain, _ = metrics.overhead(inbound.drop(columns=["ws_header_len"]), tls=True)
    assert "websocket" not in plain["per_layer"] and plain["per_layer"]["tls"] == 29
