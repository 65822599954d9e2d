"""--publisher esp32 end to end against the emulated board, as our users run it (the docker-group user,
from its own clone): `testbed board emulate` (board-emu behind a pseudo-terminal, clock offset and drift
drawn here and not shown to the orchestrator), then the study's sweep through its serial port. The board
connects to the broker's port published on this host's LAN address (not docker-proxy on 127.0.0.1)."""

from __future__ import annotations

import json
import random
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.publishers.board import protocol

from .board_emu import emulate as _emulate
from .conftest import owned
from .docker_user import DockerUser

CHACHA = 0xCCA9


@pytest.fixture(scope="module")
def board(docker_user: DockerUser) -> Iterator[tuple[Path, dict[str, float]]]:
    rng = random.Random()
    truth = {"offset_us": rng.uniform(-3e6, 3e6), "drift_ppm": rng.uniform(-40, 40)}
    proc, pty = _emulate(docker_user, "board", "--clock-offset-us", f"{truth['offset_us']:.0f}",
                         "--drift-ppm", f"{truth['drift_ppm']:.3f}", "--seed", "5",
                         # an asymmetric path: 3 ms + U[0, 1] ms up, 0.5 ms + U[0, 0.2] ms down
                         "--path-up-us", "3000", "--path-up-jitter-us", "1000",
                         "--path-down-us", "500", "--path-down-jitter-us", "200",
                         "--truth-log", str(docker_user.work / "truth.csv"))
    yield pty, truth
    proc.terminate()
    proc.wait(timeout=30)


def test_the_studys_sweep_with_the_emulated_board(docker_user: DockerUser, board: tuple[Path, dict]) -> None:
    pty, truth = board
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "board-sweep")
    proc = docker_user.testbed("sweep", "--payloads", "65,100", "--samples", "200", "--interval", "50ms",
                               "--publisher", "esp32", "--serial-port", str(pty), "--out", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bundle = next(p for p in out.iterdir() if p.is_dir())
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert {c["status"] for c in manifest["cells"].values()} == {"ok"} and len(manifest["cells"]) == 4
    for cell_id in manifest["cells"]:
        run = bundle / "runs" / cell_id
        for name in ("metrics.json", "per_message.csv", "packets.csv", "cell.json", "logs/publisher.csv",
                     "logs/subscriber.csv", "logs/serial.log", "logs/board_messages.csv", "capture/capture.pcapng"):
            assert (run / name).is_file(), f"{cell_id}: {name} missing"
        assert stat.S_IMODE((run / "logs" / "serial.log").stat().st_mode) == 0o600
        board_msgs = pd.read_csv(run / "logs" / "board_messages.csv")
        assert len(board_msgs) == 200 and board_msgs["heap"].gt(0).all() and board_msgs["rssi"].lt(0).all()
        assert manifest["cells"][cell_id]["board"]["chip"], manifest["cells"][cell_id]
        cell = json.loads((run / "cell.json").read_text())
        assert cell["board"]["proto"] == protocol.VERSION and cell["board"]["chip"] == "board-emu"
        assert cell["board"]["sw_crypto"] == ["all"]  # the emulator says it: no crypto hardware on a PC
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["loss"]["received_unique"] == 200
        clock = metrics["clock"]
        assert clock["available"], clock
        # lab = board + offset: the estimate undoes the injected offset (plus what the drift added since
        # the emulator started, at most 40 ppm x 20 min, and the path's asymmetry, within the bound)
        assert abs(clock["pre"]["offset_us"] + truth["offset_us"]) < 50_000, (clock, truth)
        # the bound covers half the 3.5 ms round trip: too wide against a ~3 ms uplink, so it is withheld
        assert clock["one_way_delay"]["available"] is False and metrics["uplink_ms"]["available"] is False
        _check_uplink_against_the_truth(run, docker_user.work / "truth.csv", clock["bound_us"])
        if cell_id.startswith("tls"):  # what the broker negotiated, read from the capture's ServerHello
            pub = [s for s in metrics["tls"]["sessions"] if s["role"] == "publisher"]
            assert pub and all(int(s["cipher_suite_id"], 16) == CHACHA for s in pub), metrics["tls"]
            assert metrics["tls"]["version"] == "TLS 1.2"
            # not on the docker-proxy relay: the broker saw the board's connection come from this host's
            # bridge, not from the proxy's 127.0.0.1 leg
            assert all(not s["client_ip"].startswith("127.") for s in pub)
    report = (bundle / "report.md").read_text()
    assert "## Board clock" in report
    board_clock = report.split("## Board clock", 1)[1].split("\n## ", 1)[0]  # the headline may cite it too
    assert board_clock.count("one-way delay is not available at that precision") == 4
    assert owned("container") == [] and owned("network") == []


def _check_uplink_against_the_truth(run: Path, truth_log: Path, bound_us: float) -> None:
    """The uplink (broker-side capture time minus the send time mapped to the lab's clock) against the
    emulator's true send times (its truth log): medians within max(0.3 ms, the clock's bound)."""
    pm = pd.read_csv(run / "per_message.csv")
    sends = pd.read_csv(truth_log, comment="#")
    sends = sends[sends["kind"] == "send"]
    board = pd.read_csv(run / "logs" / "board_messages.csv")
    true_send = board.merge(sends, left_on="t_board_us", right_on="board_us")[["seq_x", "true_us"]]
    true_send.columns = ["seq", "true_us"]
    both = pm.merge(true_send, on="seq")
    assert len(both) == 200
    true_uplink_ms = (both["broker_in_us"] - both["true_us"]) / 1000
    error = abs(both["uplink_ms"].median() - true_uplink_ms.median())
    print(f"{run.name}: uplink median {both['uplink_ms'].median():.3f} ms, true {true_uplink_ms.median():.3f} ms, "
          f"clock bound {bound_us / 1000:.3f} ms")
    assert error <= max(0.3, bound_us / 1000), (error, bound_us)


def test_a_board_unplugged_mid_sweep_fails_its_cell_with_its_log_and_the_rest_at_once(
        docker_user: DockerUser) -> None:
    proc, pty = _emulate(docker_user, "unplug", "--exit-after-messages", "60")
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "board-unplug")
    run = docker_user.testbed("sweep", "--payloads", "65,100", "--samples", "200", "--interval", "20ms",
                              "--publisher", "esp32", "--serial-port", str(pty), "--out", str(out), timeout=900)
    proc.wait(timeout=30)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stdout[-2000:] + run.stderr[-2000:]
    bundle = next(p for p in out.iterdir() if p.is_dir())
    cells = json.loads((bundle / "manifest.json").read_text())["cells"]
    assert {c["status"] for c in cells.values()} == {"failed"} and len(cells) == 4
    first = min(cells.values(), key=lambda c: c["started_utc"])
    first_id = next(k for k, v in cells.items() if v is first)
    assert "went away" in first["error"] or "printed nothing" in first["error"], first
    serial = (bundle / "runs" / first_id / "logs" / "serial.log").read_text()
    assert "MSG seq=59 " in serial  # everything the board said before it vanished is kept
    rest = [c["error"] for k, c in cells.items() if k != first_id]
    assert all("unusable since an earlier cell" in e for e in rest), rest
    assert owned("container") == [] and owned("network") == []


def test_a_board_cell_over_mqtt5_in_a_persistent_session(docker_user: DockerUser, board: tuple[Path, dict]) -> None:
    """`testbed run --publisher esp32 --qos 1 --mqtt 5 --session persistent --inflight 4` reaches the board (serial
    protocol version 3's RUN keys) and the wire says so: the board's and the subscriber's CONNECT are MQTT 5 (the
    board's with Clean Start 0), every exchange is a PUBLISH and its PUBACK, timed on the board's clock too."""
    pty, _truth = board
    docker_user.testbed("down")
    out = docker_user.work / "board-mqtt5"
    proc = docker_user.testbed("run", "--scenario", "tls", "--samples", "20", "--interval", "50ms", "--qos", "1",
                               "--mqtt", "5", "--session", "persistent", "--inflight", "4", "--publisher", "esp32",
                               "--serial-port", str(pty), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ex = pd.read_csv(out / "exchanges.csv")
    assert len(ex) == 20 and ex["complete"].all() and set(ex["packets_up"] + ex["packets_down"]) == {2}
    assert ex["ack_ms_device"].notna().all(), "the board's own time to PUBACK"
    keys = out / "both.keys"
    keys.write_text("".join(k.read_text() for k in sorted((out / "keylogs").glob("*.keys"))))
    rows = subprocess.run(["tshark", "-n", "-r", str(out / "capture" / "capture.pcapng"), "-o",
                           f"tls.keylog_file:{keys}", "-Y", "mqtt.msgtype == 1", "-T", "fields", "-e", "mqtt.clientid",
                           "-e", "mqtt.ver", "-e", "mqtt.conflag.cleansess"],
                          capture_output=True, text=True, check=True, timeout=120).stdout.split("\n")
    connects = {r.split("\t")[0]: r.split("\t")[1:] for r in rows if r}
    assert connects["testbed-publisher"][0] == "5" and connects["testbed-publisher"][1] in ("0", "False"), connects
    assert connects["testbed-subscriber"][0] == "5", connects
