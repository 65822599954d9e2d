"""A board run that fails leaves logs/serial_transcript.log, the link's last lines both ways: it is written
0600 and holds nothing of the RUN's credentials (issue 22 part 1; the run's RUN carries the password of an
exposed broker, orchestrator/lab/board_side.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from orchestrator.lab.board_side import with_auth
from orchestrator.lab.topology import prepare_run_dir
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.board.publisher import LINKS, BoardPublisher


@pytest.fixture(autouse=True)
def _links_closed():
    yield
    LINKS.close()


def test_a_failed_runs_transcript_is_private_and_holds_no_credential(board_emu, broker_factory,
                                                                     tmp_path: Path) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")  # its plain listener takes any user
    emu = board_emu("--exit-after-messages", "3")
    scenario = with_auth(load_scenario("plain"))
    lay, pki = prepare_run_dir(tmp_path / "cell", scenario, acl=True)
    assert pki is not None
    password = pki.password_for("publisher")
    spec = RunSpec(scenario="plain", samples=50, interval_ms=20, publisher="esp32", serial_port=emu.pty)
    pub = BoardPublisher(scenario, lay, pki, spec, broker_host="127.0.0.1", broker_port=broker.plain_port)
    assert pub.cell().get("password") == password  # the RUN carries it
    pub.start(None)
    pub.go()
    assert pub.wait_exit(30) == 1
    transcript = lay.serial_transcript
    assert stat.S_IMODE(transcript.stat().st_mode) == 0o600
    text = transcript.read_text()
    assert "> RUN BEGIN" in text and "MSG seq=2" in text  # the evidence is there ...
    assert "RUN CHUNK i=0 <redacted>" in text  # ... without the RUN's body
    chunks = [ln for ln in text.splitlines() if "RUN CHUNK" in ln]
    assert chunks and all("<redacted>" in ln for ln in chunks)
    assert password not in text
    assert pub.error() and password not in pub.error()
