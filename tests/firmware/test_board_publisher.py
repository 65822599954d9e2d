"""BoardPublisher (orchestrator/publishers/board/publisher.py) against the REAL board-emu and a local
Mosquitto: one RUN per cell over a link opened once, the files the analysis reads written as the virtual
device writes them (send times mapped to the lab's clock), and an unplugged board failing the cell and
the next ones at once."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pandas as pd
import pytest
from test_board_emu import time_echo  # noqa: F401 - the fixture

from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.board.publisher import LINKS, BoardPublisher


@pytest.fixture(autouse=True)
def _links_closed():
    yield
    LINKS.close()


def _publisher(tmp_path: Path, name: str, pty: str, port: int, sync: int | None, samples: int = 20) -> BoardPublisher:
    lay = Layout(tmp_path / name)
    lay.logs.mkdir(parents=True)
    spec = RunSpec(scenario="plain", samples=samples, interval_ms=20, publisher="esp32", serial_port=pty)
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
        # the board's clock is 4 s behind: its own stamps are, the mapped ones are back on the lab's
        assert (board["t_board_us"] < started - 3.5e6).all()
        assert abs(sends["t_send_us"].iloc[0] - started) < 1e6
        summary = json.loads(pub.lay.publisher_summary.read_text())
        assert summary["ok"] and summary["clock"]["available"] and summary["board"]["proto"] == 1
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
