"""BoardPublisher (orchestrator/publishers/board/publisher.py) against the REAL board-emu and a local
Mosquitto: one RUN per cell over a link opened once, the files the analysis reads written as the virtual
device writes them (send times mapped to the lab's clock), the PUBACK round trip at QoS 1, an unplugged
board failing the cell and the next ones at once, and a board whose network drops failing by name."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pandas as pd
import pytest
from test_board_emu import time_echo  # noqa: F401 - the fixture
from test_qos_sessions import Subscriber

from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.publisher import LINKS, BoardPublisher
from orchestrator.runanalysis.analyse import with_delay_verdict


@pytest.fixture(autouse=True)
def _links_closed():
    yield
    LINKS.close()


def _publisher(tmp_path: Path, name: str, pty: str, port: int, sync: int | None, samples: int = 20,
               qos: int = 0, **axes: object) -> BoardPublisher:
    lay = Layout(tmp_path / name)
    lay.logs.mkdir(parents=True)
    spec = RunSpec(scenario="plain", samples=samples, interval_ms=20, publisher="esp32", serial_port=pty, qos=qos,
                   **axes)
    return BoardPublisher(load_scenario("plain"), lay, None, spec, broker_host="127.0.0.1", broker_port=port,
                          sync=("127.0.0.1", sync) if sync else None)


def test_a_cell_becomes_the_virtual_devices_files_on_the_labs_clock(board_emu, broker_factory, time_echo,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--clock-offset-us", "-4000000", "--drift-ppm", "30")
    for name in ("cell-1", "cell-2"):  # one link, two RUNs
        pub = _publisher(tmp_path, name, emu.pty, broker.plain_port, time_echo)
        pub.start(None)
        started = time.time() * 1e6
        pub.go()
        assert pub.wait_exit(30) == 0, pub.error()
        logs = pub.lay.logs
        sends = pd.read_csv(logs / "publisher.csv")
        board = pd.read_csv(logs / "board_messages.csv")
        assert sends["seq"].tolist() == list(range(20)) and len(board) == 20
        # the board's clock is 4 s behind: its own stamps are, the mapped ones are back on the lab's. Message by
        # message (the CI rehearsal's loaded machine sent the last of them over 0.5 s after `started`, which a
        # bound against `started` took for a board clock on time)
        behind = sends.set_index("seq")["t_send_us"] - board.set_index("seq")["t_board_us"]
        assert len(behind) == 20 and (abs(behind - 4e6) < 0.5e6).all(), behind.describe()
        assert abs(sends["t_send_us"].iloc[0] - started) < 1e6
        summary = json.loads(pub.lay.publisher_summary.read_text())
        assert summary["ok"] and summary["clock"]["available"] and summary["board"]["proto"] == p.VERSION
        assert abs(summary["clock"]["pre"]["offset_us"] - 4_000_000) < 20_000
        assert stat.S_IMODE((logs / "serial.log").stat().st_mode) == 0o600
        assert "DONE sent=20" in (logs / "serial.log").read_text()


def test_an_unplugged_board_fails_its_cell_and_the_next_at_once(board_emu, broker_factory, tmp_path: Path) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--exit-after-messages", "3")
    pub = _publisher(tmp_path, "cell-1", emu.pty, broker.plain_port, None, samples=50)
    pub.start(None)
    pub.go()
    assert pub.wait_exit(30) == 1
    assert "went away" in pub.error() or "printed nothing" in pub.error()
    assert len(pd.read_csv(pub.lay.logs / "board_messages.csv")) == 3  # what it sent is kept
    assert "MSG seq=2" in (pub.lay.logs / "serial.log").read_text()
    nxt = _publisher(tmp_path, "cell-2", emu.pty, broker.plain_port, None)
    t0 = time.monotonic()
    with pytest.raises(Exception) as again:
        nxt.start(None)
    assert time.monotonic() - t0 < 1 and "unusable since an earlier cell" in str(again.value)


def test_a_board_that_reboots_mid_cell_fails_it_by_name_and_serves_the_next(board_emu, broker_factory,
                                                                            tmp_path: Path) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--reboot-after-messages", "3")
    pub = _publisher(tmp_path, "cell-1", emu.pty, broker.plain_port, None)
    pub.start(None)
    pub.go()
    assert pub.wait_exit(30) == 1 and "reset during the run" in pub.error()
    nxt = _publisher(tmp_path, "cell-2", emu.pty, broker.plain_port, None)
    nxt.start(None)  # waits for the rebooted board's READY
    nxt.go()
    assert nxt.wait_exit(30) == 0, nxt.error()


@pytest.mark.parametrize("up_us,down_us", [(0, 0), (3000, 2000)])
def test_qos1_carries_the_puback_round_trip_on_the_boards_clock(board_emu, broker_factory, tmp_path: Path,
                                                                up_us: int, down_us: int) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--path-up-us", str(up_us), "--path-down-us", str(down_us), "--drift-ppm", "20")
    pub = _publisher(tmp_path, "cell-1", emu.pty, broker.plain_port, None, qos=1)
    pub.start(None)
    pub.go()
    assert pub.wait_exit(30) == 0, pub.error()
    board = pd.read_csv(pub.lay.logs / "board_messages.csv")
    assert board["seq"].tolist() == list(range(20))
    assert (board["puback_us"] > 0).all() and (board["puback_us"] >= up_us + down_us).all()
    rtt = json.loads(pub.lay.publisher_summary.read_text())["puback_rtt_ms"]
    assert rtt["n"] == 20 and 0 < rtt["median"] <= rtt["p95"] <= rtt["max"] < 1000
    assert rtt["median"] >= (up_us + down_us) / 1000  # the path's holds are inside the round trip
    assert rtt["median"] == pytest.approx(board["puback_us"].median() / 1000, abs=0.001)
    # no clock exchange: one-way delay is not available, the clock block gives the round trip instead
    clock = json.loads(pub.lay.publisher_summary.read_text())["clock"]
    assert with_delay_verdict({}, clock, rtt)["puback_rtt_ms"] == rtt


def test_a_board_publishes_over_mqtt5_in_a_persistent_session_with_a_window(board_emu, broker_factory,
                                                                             tmp_path: Path) -> None:
    """Protocol version 3's keys reach the board's core: Mosquitto sees an MQTT 5 client with Clean Start 0, QoS 2
    with 4 messages in flight completes every exchange, the send log carries vdevice's ack columns (the time to
    PUBCOMP, the PUBLISH's size) and the summary the session's reconnects, resends and losses."""
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu()
    pub = _publisher(tmp_path, "cell-1", emu.pty, broker.plain_port, None, qos=2, mqtt="5", session="persistent",
                     topic_alias="on", inflight=4, ack_timeout_ms=5000)
    pub.start(None)
    pub.go()
    assert pub.wait_exit(30) == 0, pub.error()
    assert "as testbed-publisher (p5, c0," in broker.log.read_text()  # protocol level 5, Clean Start 0
    sends = pd.read_csv(pub.lay.logs / "publisher.csv")
    assert list(sends.columns) == ["seq", "t_send_us", "bytes", "ack_us", "mqtt_bytes"]
    assert sorted(sends["seq"]) == list(range(20)) and (sends["ack_us"] > 0).all()
    # MQTT 5 with the alias: the first PUBLISH carries the topic (15 B) and the alias property, the others only it
    first, rest = sends.set_index("seq")["mqtt_bytes"].iloc[0], set(sends.set_index("seq")["mqtt_bytes"].iloc[1:])
    assert len(rest) == 1 and first - rest.pop() == len("testbed/sensors")
    summary = json.loads(pub.lay.publisher_summary.read_text())
    assert summary["ok"] and (summary["reconnects"], summary["resent"], summary["lost"]) == (0, 0, 0)
    assert "DONE sent=20 " in (pub.lay.logs / "serial.log").read_text()


def test_a_boards_persistent_session_resends_what_an_outage_lost(board_emu, broker_factory, tmp_path: Path) -> None:
    """board-emu's network goes down for 2 s after the 5th message: the board's acknowledgement wait (1 s) ends
    the connection, the board connects again once the network is back, Mosquitto says session present, and the
    unacknowledged messages go again with DUP: the subscriber gets every one, the summary counts the resends."""
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    sub = Subscriber(broker.plain_port, mqtt.MQTTv5)
    emu = board_emu("--network-drop-after-messages", "5", "--network-down-ms", "2000")
    pub = _publisher(tmp_path, "cell-1", emu.pty, broker.plain_port, None, samples=40, qos=1, mqtt="5",
                     session="persistent", inflight=4, ack_timeout_ms=1000)
    try:
        pub.start(None)
        pub.go()
        assert pub.wait_exit(40) == 0, pub.error()
        sub.wait_for(40)
    finally:
        sub.stop()
    summary = json.loads(pub.lay.publisher_summary.read_text())
    assert summary["ok"] and summary["reconnects"] >= 1 and summary["resent"] >= 1 and summary["lost"] == 0, summary
    assert sorted({s for s, *_ in sub.got}) == list(range(40)), "every message delivered"
    assert broker.log.read_text().count("as testbed-publisher (p5, c0,") == 1 + summary["reconnects"]
    sends = pd.read_csv(pub.lay.logs / "publisher.csv")
    assert (sends["ack_us"] > 1_000_000).any(), "some acknowledged only after the outage"


def test_qos0_has_no_puback_round_trip_and_a_precise_clock_withholds_it() -> None:
    from orchestrator.publishers.board.lines import Msg
    from orchestrator.publishers.board.records import puback_rtt_ms
    assert puback_rtt_ms([Msg(0, 1, 65, 84, 1, -55)]) is None
    rtt = puback_rtt_ms([Msg(i, 1, 65, 84, 1, -55, puback_us=1000 * (i + 1)) for i in range(20)])
    assert rtt == {"n": 20, "median": 10.5, "p95": 19.05, "max": 20.0}
    coarse = with_delay_verdict({"uplink_ms": {"available": True, "median": 1.0}},
                                {"available": True, "bound_us": 5000.0}, rtt)
    assert not coarse["one_way_delay"]["available"] and coarse["puback_rtt_ms"] == rtt
    fine = with_delay_verdict({"uplink_ms": {"available": True, "median": 10.0}},
                              {"available": True, "bound_us": 100.0}, rtt)
    assert fine["one_way_delay"]["available"] and "puback_rtt_ms" not in fine


@pytest.mark.parametrize("qos,name,within_s", [(1, "waiting for PUBACK", 10), (0, "did not close the connection", 20)])
def test_a_board_whose_network_drops_fails_the_cell_by_name_and_the_next_too(board_emu, broker_factory,
                                                                             tmp_path: Path, qos: int, name: str,
                                                                             within_s: float) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--network-drop-after-messages", "5")
    pub = _publisher(tmp_path, "cell-1", emu.pty, broker.plain_port, None, qos=qos)
    pub.start(None)
    t0 = time.monotonic()
    pub.go()
    assert pub.wait_exit(40) == 1
    took = time.monotonic() - t0
    assert within_s <= took < within_s + 5, took  # the board's own timeout (PUBACK 10 s; drain 20 s)
    assert pub.error().startswith("the board reported RecvTimeout: ") and name in pub.error()
    assert ("the network is down" in pub.error()) == (qos == 1)  # the PUBACK wait names the transport's cause
    serial = (pub.lay.logs / "serial.log").read_text()
    assert "MSG seq=4 " in serial and "ERROR RecvTimeout: " in serial
    board = pd.read_csv(pub.lay.logs / "board_messages.csv")
    # QoS 1: the five acknowledged, then the sixth sent into the void without a round trip; QoS 0: all sent
    assert len(board) == (6 if qos else 20) and board["puback_us"].notna().sum() == (5 if qos else 0)
    nxt = _publisher(tmp_path, "cell-2", emu.pty, broker.plain_port, None, qos=qos)
    nxt.start(None)  # the serial link is fine; the network is still down
    t0 = time.monotonic()
    nxt.go()
    assert nxt.wait_exit(30) == 1
    assert time.monotonic() - t0 < 15  # the RUN's connect timeout, 10 s
    assert nxt.error().startswith("the board reported ConnectTimeout: ") and "network is down" in nxt.error()
