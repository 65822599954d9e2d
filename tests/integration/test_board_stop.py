"""Ctrl-C in a board cell, as the docker-group user: the host's STOP ends the board's run too (else it
would publish on into the next sweep), the cell is kept as interrupted, nothing of ours is left."""

from __future__ import annotations

import json
import signal
import time

from .board_emu import emulate
from .conftest import owned
from .docker_user import DockerUser


def test_ctrl_c_mid_cell_stops_the_boards_run_and_the_board_serves_the_next_run(docker_user: DockerUser) -> None:
    emu, pty = emulate(docker_user, "stop")
    try:
        docker_user.testbed("down")
        out = docker_user.mkdir(docker_user.work / "board-stop")
        proc = docker_user.popen("sweep", "--scenarios", "plain", "--payloads", "65", "--samples", "3000",
                                 "--interval", "20ms", "--publisher", "esp32", "--serial-port", str(pty),
                                 "--out", str(out))
        try:
            deadline, serial = time.monotonic() + 180, None
            while time.monotonic() < deadline and proc.poll() is None:
                serial = next(out.glob("*/runs/*/logs/serial.log"), None)
                if serial is not None and "MSG seq=50 " in serial.read_text():
                    break
                time.sleep(0.2)
            assert serial is not None and proc.poll() is None, "the board cell never got going"
            proc.send_signal(signal.SIGINT)
            _stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
        text = serial.read_text()
        assert "ERROR Interrupted" in text, text[-1500:]  # the board stopped, told by the host
        sent = text.count("\nMSG ") + text.startswith("MSG ")
        assert sent < 3000, sent
        cell = json.loads((serial.parents[1] / "cell.json").read_text())
        assert cell["status"] == "interrupted"
        assert owned("container") == [] and owned("network") == []
        # the board is READY at once for the next run (it would otherwise still be publishing for a minute)
        started = time.monotonic()
        run = docker_user.testbed("run", "--scenario", "plain", "--samples", "20", "--interval", "20ms",
                                  "--publisher", "esp32", "--serial-port", str(pty),
                                  "--out", str(docker_user.work / "board-after-stop"), timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        print(f"board stop: {sent} of 3000 sent before STOP; next run took {time.monotonic() - started:.1f} s")
    finally:
        emu.terminate()
        emu.wait(timeout=30)
