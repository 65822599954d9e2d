"""`testbed board check` against board-emu (the firmware's board session on a pseudo-terminal) where the board is
wrong before any lab starts: no such port, a board speaking another protocol version, a board whose BANNER names no
env of this testbed, a port where nothing answers. Each is one FAIL line naming the step and what is wrong, the
steps it leaves out on one line, exit 1 and no traceback. A board that passes, and one whose clock replies never
come back, need the lab: tests/integration/test_board_check.py."""

from __future__ import annotations

import os
import pty
import threading
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.check import board_envs
from orchestrator.publishers.board.publisher import LINKS

LATER = "run, suites, clock, heap, rssi, phases"


def _check(capsys: pytest.CaptureFixture[str], port: str, *extra: str) -> list[str]:
    code = main(["board", "check", "--serial-port", port, "--ready-timeout", "3", *extra])
    got = capsys.readouterr()
    assert code == 1 and "Traceback" not in got.err and "internal error" not in got.err, got
    assert got.err.splitlines()[0].startswith("error: board check failed: "), got.err
    return got.out.splitlines()


def test_no_such_port_fails_the_port_step(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lines = _check(capsys, str(tmp_path / "ttyUSB9"))
    assert lines[0].startswith(f"FAIL     port    cannot open serial port {tmp_path / 'ttyUSB9'} at 115200 Bd")
    assert "is the board plugged in?" in lines[0]
    assert lines[1:] == [f"not run  banner, {LATER}: the port did not open"]


def test_another_protocol_version_fails_the_banner_by_name(board_emu, capsys: pytest.CaptureFixture[str]) -> None:
    emu = board_emu("--banner-proto", "1")
    lines = _check(capsys, emu.pty)
    assert lines[0] == f"ok       port    {emu.pty} opened at 115200 Bd"
    assert lines[1].startswith(f"FAIL     banner  the board on {emu.pty} (115200 Bd) speaks serial protocol version 1, "
                               f"this testbed speaks version {p.VERSION} (flash the firmware of this testbed:")
    assert lines[2:] == [f"not run  {LATER}: no usable BANNER"]


def test_a_banner_from_other_firmware_fails_the_banner_by_name(board_emu, capsys: pytest.CaptureFixture[str]) -> None:
    emu = board_emu("--banner-board", "my-weather-station")
    lines = _check(capsys, emu.pty)
    assert lines[1].startswith("FAIL     banner  the board says board=my-weather-station, not one of this testbed's "
                               f"envs ({', '.join(board_envs())})")
    assert "esp32dev-chacha-only" in lines[1] and lines[2:] == [f"not run  {LATER}: not this testbed's firmware"]


def test_a_port_where_nothing_answers_fails_the_banner_with_what_it_printed(
        capsys: pytest.CaptureFixture[str]) -> None:
    master, slave = pty.openpty()  # a serial line with nothing behind it (the wrong /dev/ttyUSBn)
    port = os.ttyname(slave)
    stop = threading.Event()

    def garble() -> None:  # what a board at another baud rate looks like: bytes, never a BANNER
        while not stop.wait(0.3):
            os.write(master, b"\xff\xfe garbled at the wrong baud rate\n")

    writer = threading.Thread(target=garble)
    writer.start()
    try:
        lines = _check(capsys, port)
    finally:
        stop.set()
        writer.join()
        os.close(master)
        os.close(slave)
    assert lines[1].startswith(f"FAIL     banner  no BANNER and READY from the board on {port} (115200 Bd) "
                               "within 3 s (check the port and the baud rate")
    assert lines[1].endswith("garbled at the wrong baud rate'"), lines[1]


def test_a_run_refuses_a_missing_or_wrong_board_before_anything_starts(board_emu, capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    """`testbed run --publisher esp32` opens the port and reads the board's BANNER in its preflight (issue 23 part 4):
    no such port, or a board of another protocol version, is refused before the engine is even asked (before, the
    port was opened after the broker, the capture and the subscriber had started)."""
    wrong = board_emu("--banner-proto", "1")
    for port, said in ((str(tmp_path / "ttyUSB9"), f"cannot open serial port {tmp_path / 'ttyUSB9'}"),
                       (wrong.pty, "speaks serial protocol version 1")):
        out = tmp_path / f"out-{len(port)}"
        try:
            code = main(["run", "--publisher", "esp32", "--serial-port", port, "--samples", "5", "--out", str(out)])
        finally:  # the process's board links (a CLI process has one command): a later test's pty may get this name
            LINKS.close()
        got = capsys.readouterr()
        assert code == 1 and said in got.err, got
        assert "Traceback" not in got.err and "internal error" not in got.err and "Docker" not in got.err, got.err
        assert not (out / "cell.json").exists(), sorted(out.rglob("*")) if out.exists() else None
