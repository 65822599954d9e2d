"""`testbed board check` against board-emu through the lab, as our users run it (the docker-group user, from its own
clone): a board that behaves passes every step (the port, the banner and its versions, a 20-message run, the
ChaCha20 suite alone in its ClientHello, the clock with its bound, heap and RSSI); a board whose clock requests get
no reply fails the clock step by name, the others still ok. The failures found before the lab starts (no such
port, another protocol, other firmware, a silent port) are in tests/firmware/test_board_check.py."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.publishers.board.protocol import VERSION

from .board_emu import emulate
from .conftest import owned
from .docker_user import DockerUser

STEPS = ("port", "banner", "run", "suites", "clock", "heap", "rssi", "phases")


def _check(user: DockerUser, name: str, *emu_args: str) -> tuple[int, list[str], str, Path]:
    proc, pty = emulate(user, name, *emu_args)
    out = user.work / f"{name}-run"
    try:
        run = user.testbed("board", "check", "--serial-port", str(pty), "--out", str(out), timeout=600)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line[:8].strip() in ("ok", "FAIL", "not run")]
    return run.returncode, lines, run.stdout + run.stderr, out


def _step(lines: list[str], name: str) -> str:
    [line] = [x for x in lines if x[9:16].strip() == name]
    return line


def test_a_board_that_behaves_passes_every_step(docker_user: DockerUser) -> None:
    docker_user.testbed("down")
    code, lines, said, out = _check(docker_user, "check-good", "--seed", "3")
    assert code == 0, said[-3000:]
    assert [x[9:16].strip() for x in lines] == list(STEPS) and all(x.startswith("ok ") for x in lines), said
    assert f"board-emu, protocol {VERSION}, chip board-emu" in _step(lines, "banner")
    assert "20/20 messages arrived (tls, 65 B, every 250 ms)" in _step(lines, "run")
    assert _step(lines, "suites").endswith(
        "offered TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 (0xcca9); the broker chose "
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256")
    assert "bound +-" in _step(lines, "clock") and "-55 .. -55 dBm" in _step(lines, "rssi")
    assert "key exchange" in _step(lines, "phases") and "(board-emu (the host's CPU" in _step(lines, "phases")
    assert "board check passed" in said
    metrics = json.loads((out / "metrics.json").read_text())  # the run folder is kept as the evidence
    assert metrics["loss"]["received_unique"] == 20 and metrics["clock"]["available"]
    assert owned("container") == [] and owned("network") == []


def test_a_board_whose_clock_requests_get_no_reply_fails_the_clock_by_name(docker_user: DockerUser) -> None:
    code, lines, said, _out = _check(docker_user, "check-noclock", "--no-clock-replies")
    assert code == 1, said[-3000:]
    assert "error: board check failed: clock" in said
    clock = _step(lines, "clock")
    assert clock.startswith("FAIL     clock   no clock mapping: ") and "firewall" in clock, clock
    assert all(_step(lines, s).startswith("ok ") for s in STEPS if s != "clock"), said
    assert owned("container") == [] and owned("network") == []
