"""Issue 24 part 3: a lab kept up within a block measures what a fresh lab per cell measures, and the new broker
process of a cell refuses the TLS session of the cell before it (read from the wire).

The same 6-cell plan runs both ways as the docker-group user: per cell the counts, payload and record bytes and the
suite are identical; handshake bytes differ by at most 2 B per ECDSA signature (DER length varies: the server's
certificate, the CA's and the ServerKeyExchange - the client signs nothing), retransmitted frames aside; the median
delay's 99 % bootstrap intervals overlap over the plan's messages, each cell's printed.

The interval over the plan resamples cells, then messages within each (a cluster bootstrap): the cell is the unit
the host's drift moves. Resampling messages alone holds only the sampling within one sweep, and the two sweeps run
one after the other: in six runs of this test here that interval failed to overlap twice, kept-up slower both times
(0.09 and 0.11 ms). Eight sweeps of this plan in ABBA order (kept, fresh, fresh, kept, ...; stop 32) gave pooled
medians of 0.314, 0.393, 0.363, 0.287 ms kept and 0.262, 0.341, 0.353, 0.331 ms fresh - the modes' means 0.017 ms
apart, single sweeps up to 0.13 ms, cells within one sweep from 0.12 to 0.46 ms - and with cells resampled all 16
kept/fresh pairs of them overlap (13 with each median inside the other's interval). A cost of the kept mode that
matters (an exec, a copy or a wait per message) is a millisecond or more; an offset under about 0.05 ms is not
resolved on this host. Even with cells resampled, the intervals failed to overlap once more
(stop 35, on a host twice as slow), so the test allows a gap of up to GAP_MS between them: a quarter of the
smallest cost that matters, still found every time, and above any drift seen between two sweeps.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from orchestrator.backends import compose, docker
from orchestrator.lab.broker import BROKER
from orchestrator.lab.keptlab import KeptLab
from orchestrator.model.scenario import load_scenario

from .conftest import owned, service_container
from .docker_user import DockerUser

PLAN = ("--scenarios", "plain,tls", "--payloads", "65,100,200", "--samples", "30", "--interval", "20ms", "--seed", "3")
SAME = [("capture", "publish_publisher_to_broker"), ("capture", "publish_broker_to_subscriber"),
        ("capture", "mqtt_messages"), ("loss", "sent"), ("loss", "received_unique"), ("throughput", "payload_bytes"),
        ("overhead_bytes", "mqtt_len"), ("overhead_bytes", "tls_record_len"), ("overhead_bytes", "tcp_payload_len"),
        ("tls", "version"), ("tls", "cipher_suite")]
SIGNATURES_SERVER_TO_CLIENT = 3  # server certificate, CA certificate, ServerKeyExchange
GAP_MS = 0.25  # the intervals may lie this far apart: drift between sweeps, not a cost of the mode (see above)


def _sweep(user: DockerUser, name: str, *args: str) -> Path:
    out = user.mkdir(user.work / name)
    proc = user.testbed("sweep", *PLAN, "--out", str(out), *args, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def both(docker_user: DockerUser) -> tuple[Path, Path]:
    docker_user.testbed("down")
    return _sweep(docker_user, "kept"), _sweep(docker_user, "fresh", "--fresh-lab-per-cell")


def _delays(bundle: Path, cell_id: str) -> np.ndarray:
    return pd.read_csv(bundle / "runs" / cell_id / "per_message.csv")["delay_ms"].dropna().to_numpy()


def _median_ci(bundle: Path, cell_ids: list[str], rounds: int = 4000) -> tuple[float, float]:
    """99 % percentile bootstrap interval of the median delay of the cells' messages: each round draws the cells
    with replacement, then each drawn cell's messages (one cell: its messages alone)."""
    cells = [_delays(bundle, c) for c in cell_ids]
    rng = np.random.default_rng(1)
    medians = np.empty(rounds)
    for r in range(rounds):
        drawn = rng.integers(0, len(cells), len(cells)) if len(cells) > 1 else [0]
        medians[r] = np.median(np.concatenate([rng.choice(cells[i], len(cells[i])) for i in drawn]))
    return float(np.percentile(medians, 0.5)), float(np.percentile(medians, 99.5))


def _metrics(bundle: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(bundle.glob("runs/*/metrics.json"))}


RETRANSMITTED = ("tcp.analysis.retransmission || tcp.analysis.fast_retransmission"
                 " || tcp.analysis.spurious_retransmission")


def _handshake_bytes_sent_once(bundle: Path, cell_id: str) -> tuple[int, int]:
    """The publisher's handshake bytes each way as TCP payload (the TLS records and the MQTT CONNECT/CONNACK), less
    what tshark finds retransmitted.

    A handshake's wire bytes (metrics.json) count every frame up to CONNACK, which the metric keeps as the wire's
    truth; two things in them are the kernel's timing, not the lab's mode: a retransmission (CI, stop 32: one more
    103-byte frame, the client's Finished sent again as a tail loss probe when the broker's answer was late) and the
    pure ACKs (this stop's rehearsal: 132 B more in the fresh lab's cell, the broker's kernel acknowledging each of
    the client's three last flights at once instead of one delayed ACK for them). What the lab's mode must not change
    is the payload. The metric is checked against tshark's sum of the same frames first.
    """
    run = bundle / "runs" / cell_id
    metrics = json.loads((run / "metrics.json").read_text())
    session = next(s for s in metrics["tls"]["sessions"] if s["role"] == "publisher")
    port = session["client_port"]
    rows = subprocess.run(
        ["tshark", "-r", str(run / "capture" / "capture.pcapng"), "-Y", f"tcp.port == {port}", "-T", "fields",
         "-e", "frame.number", "-e", "tcp.srcport", "-e", "frame.len", "-e", "tls.record.content_type", "-e",
         "tcp.len"], capture_output=True, text=True, check=True).stdout.splitlines()
    frames = [(int(n), int(src) == port, int(length), types.split(","), int(payload)) for n, src, length, types, payload
              in (row.split("\t") for row in rows)]
    connack = next(f[0] for f in frames if not f[1] and "23" in f[3])
    early = [f for f in frames if f[0] <= connack]
    wire = (sum(f[2] for f in early if f[1]), sum(f[2] for f in early if not f[1]))
    assert wire == (session["bytes_client_to_server"], session["bytes_server_to_client"]), (cell_id, wire)
    again = subprocess.run(["tshark", "-r", str(run / "capture" / "capture.pcapng"), "-Y",
                            f"tcp.port == {port} && frame.number <= {connack} && ({RETRANSMITTED})",
                            "-T", "fields", "-e", "frame.number"],
                           capture_output=True, text=True, check=True).stdout.split()
    resent = [f for f in early if str(f[0]) in again]
    if resent:
        print(f"{bundle.name} {cell_id}: retransmitted in the handshake: {[(f[0], f[2]) for f in resent]}")
    once = [f for f in early if f not in resent]
    return sum(f[4] for f in once if f[1]), sum(f[4] for f in once if not f[1])


def test_both_ways_give_the_same_cells(both: tuple[Path, Path]) -> None:
    kept, fresh = _metrics(both[0]), _metrics(both[1])
    assert len(kept) == 6 and set(kept) == set(fresh)
    for cell_id in kept:
        a, b = kept[cell_id], fresh[cell_id]
        for block, key in SAME:
            assert a.get(block, {}).get(key) == b.get(block, {}).get(key), (cell_id, block, key)
        if cell_id.startswith("tls"):
            (c2s_a, s2c_a), (c2s_b, s2c_b) = (_handshake_bytes_sent_once(bundle, cell_id) for bundle in both)
            assert c2s_a == c2s_b, cell_id
            assert abs(s2c_a - s2c_b) <= 2 * SIGNATURES_SERVER_TO_CLIENT, cell_id
        (la, ha_), (lb, hb_) = _median_ci(both[0], [cell_id]), _median_ci(both[1], [cell_id])
        print(f"{cell_id}: median delay 99 % CI kept [{la:.3f}, {ha_:.3f}] ms, fresh [{lb:.3f}, {hb_:.3f}] ms")
    (la, ha_), (lb, hb_) = _median_ci(both[0], list(kept)), _median_ci(both[1], list(kept))
    med_kept, med_fresh = (float(np.median(np.concatenate([_delays(b, c) for c in kept]))) for b in both)
    print(f"all cells (cells resampled): median delay kept {med_kept:.3f} ms, 99 % CI [{la:.3f}, {ha_:.3f}]; "
          f"fresh {med_fresh:.3f} ms, [{lb:.3f}, {hb_:.3f}]")
    assert la - hb_ <= GAP_MS and lb - ha_ <= GAP_MS, ((la, ha_), (lb, hb_))


def test_the_kept_sweep_says_its_order_blocks_and_what_each_cell_reused(both: tuple[Path, Path]) -> None:
    kept, fresh = both
    manifest = json.loads((kept / "manifest.json").read_text())
    assert manifest["order"]["mode"] == "blocked" and [len(b) for b in manifest["order"]["blocks"]] == [3, 3]
    cells = {p.parent.name: json.loads(p.read_text()) for p in kept.glob("runs/*/cell.json")}
    in_block = sorted((c["order"]["block"], c["order"]["in_block"], c["lab"]["cell_in_lab"]) for c in cells.values())
    assert in_block == [(b, k, k) for b in (1, 2) for k in (1, 2, 3)]  # one lab per block, up from its first cell
    for cell in cells.values():
        assert cell["lab"]["mode"] == "kept-up" and cell["lab"]["capture"]["packets"] > 0
        split = cell["lab"]["capture"]["split"]  # each cut checked on dumpcap's own file: no false alarm
        assert split["lossless"] is True and split["window_packets_in_capture"] == split["window_packets_taken"] > 0
        assert split["packets_written"] == split["packets_read"], cell
        assert not [w for w in cell.get("warnings", []) if "capture split" in w], cell
        assert bool(cell["lab"]["reused"]) == (cell["lab"]["cell_in_lab"] > 1)
        assert manifest["cells"][cell["cell_id"]]["order"] == cell["order"]
    for split in kept.glob("blocks/lab-*/split.json"):
        record = json.loads(split.read_text())
        assert record["lossless"] == 1 and record["cells_served"] == 3, record
        assert record["packets"] == record["in_cells"] + record["in_gaps"]
    assert len(list(kept.glob("blocks/lab-*/split.json"))) == 2 and not list(kept.glob("blocks/*/pki"))
    assert {json.loads(p.read_text())["lab"]["why"] for p in fresh.glob("runs/*/cell.json")} == {
        "--fresh-lab-per-cell"}
    report = (kept / "report.md").read_text()
    assert "blocked" in report
    assert owned("container") == [] and owned("network") == []


def _context(ca: Path) -> ssl.SSLContext:
    """One client context for the test (Python resumes a session only in the context that made it)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers("ECDHE-ECDSA-CHACHA20-POLY1305")
    return ctx


def _handshake(port: int, ctx: ssl.SSLContext, session: ssl.SSLSession | None = None) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="broker", session=session)  # the handshake is done on return


def _full_handshakes_offering_a_session(capture: Path) -> list[str]:
    """Per connection whose ClientHello offered a session (ID or ticket): 'full' (the server sent its Certificate)
    or 'resumed'."""
    out = subprocess.run(["tshark", "-r", str(capture), "-Y", "tls.handshake", "-T", "fields", "-e", "tcp.stream",
                          "-e", "tls.handshake.type", "-e", "tls.handshake.session_id_length"],
                         capture_output=True, text=True, check=True).stdout
    offered: set[str] = set()
    certificate: set[str] = set()
    for line in out.splitlines():
        stream, types, id_len = (line.split("\t") + ["", ""])[:3]
        kinds = types.split(",")
        if "1" in kinds and id_len.split(",")[0] not in ("", "0"):
            offered.add(stream)
        if "11" in kinds:
            certificate.add(stream)
    return ["full" if s in certificate else "resumed" for s in sorted(offered)]


def test_a_session_of_the_cell_before_is_refused_by_the_next_cells_broker(tmp_path: Path) -> None:
    scenario = load_scenario("tls")
    lab = KeptLab(tmp_path / "blocks")
    try:
        with lab.cell(scenario, tmp_path / "runs" / "n") as here:
            ctx = _context(here.lay.pki / "ca.crt")  # the lab's CA: every cell of the block has a copy
            first = _handshake(here.topo.host_port, ctx)
            session = first.session
            first.close()
            again = _handshake(here.topo.host_port, ctx, session)  # the same broker process resumes it
            assert again.session_reused, "control: the broker that issued the session resumes it"
            again.close()
            here.end_capture()
        with lab.cell(scenario, tmp_path / "runs" / "n+1") as here:
            refused = _handshake(here.topo.host_port, ctx, session)
            assert not refused.session_reused
            refused.close()
            here.end_capture()
        # the primitive --events broker-restart uses: a crash (SIGKILL) of the process, not the container
        before = {s: docker.container(compose.container_name(s)) for s in ("broker", "capture")}
        BROKER.restart_process(kill=True)
        after = {s: docker.container(compose.container_name(s)) for s in ("broker", "capture")}
        for s, c in after.items():
            old = before[s]
            assert c is not None and old is not None and c.state.running and c.state.pid == old.state.pid, s
        _handshake(here.topo.host_port, ctx).close()  # the new process listens
    finally:
        lab.down()
    assert _full_handshakes_offering_a_session(tmp_path / "runs" / "n" / "capture" / "capture.pcapng") == ["resumed"]
    assert _full_handshakes_offering_a_session(tmp_path / "runs" / "n+1" / "capture" / "capture.pcapng") == ["full"]
    assert owned("container") == []


def _publishing(out: Path, cell_id: str, lines: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list(out.glob(f"*/runs/{cell_id}/logs/subscriber.csv"))
        if logs and logs[0].read_text().count("\n") > lines:
            return
        time.sleep(0.05)
    raise AssertionError(f"{cell_id} never got going (exit {proc.poll()})")


def _cells(bundle: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: json.loads(p.read_text()) for p in bundle.glob("runs/*/cell.json")}


def _cell_order(out: Path) -> list[str]:
    """The cells in the order the sweep writing into ``out`` runs them, once its manifest exists (60 s at most)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob("*/manifest.json")):
        time.sleep(0.05)
    return json.loads(next(out.glob("*/manifest.json")).read_text())["cell_order"]


def test_a_failed_cell_does_not_poison_the_next_and_ctrl_c_in_a_block_leaves_nothing(
        docker_user: DockerUser) -> None:
    """The broker container killed in the block's first cell: that cell fails, the next cells run ok on a fresh lab.
    Then Ctrl-C in a block's second cell: the first is kept, the second interrupted, nothing left running."""
    docker_user.testbed("down")
    plan = ["--scenarios", "tls", "--payloads", "65,100,200", "--samples", "100", "--interval", "30ms",
            "--baseline", "tls"]
    out = docker_user.mkdir(docker_user.work / "kept-kill")
    proc = docker_user.popen("sweep", *plan, "--out", str(out))
    first = second = ""
    try:
        first, second, _third = _cell_order(out)
        _publishing(out, first, 10, proc)
        subprocess.run(["docker", "kill", service_container("broker")], capture_output=True, check=False)
        _stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and f"1 cell(s) failed: {first}" in stderr, stderr[-3000:]
    cells = _cells(next(p for p in out.iterdir() if p.is_dir()))
    assert cells[first]["status"] == "failed" and "broker" in cells[first]["error"]
    assert [cells[c]["status"] for c in cells if c != first] == ["ok", "ok"]
    assert cells[second]["lab"]["folder"] == "blocks/lab-002" and cells[second]["lab"]["cell_in_lab"] == 1
    assert owned("container") == []

    out = docker_user.mkdir(docker_user.work / "kept-sigint")
    proc = docker_user.popen("sweep", *plan, "--out", str(out))
    try:
        first, second, _third = _cell_order(out)
        _publishing(out, second, 10, proc)
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    bundle = next(p for p in out.iterdir() if p.is_dir())
    cells = _cells(bundle)
    assert cells[first]["status"] == "ok" and (bundle / "runs" / first / "metrics.json").exists()
    assert cells[second]["status"] == "interrupted" and set(cells) == {first, second}
    assert (bundle / "runs" / second / "logs" / "subscriber.log").exists()  # its evidence, saved on the way down
    assert json.loads((bundle / "blocks" / "lab-001" / "split.json").read_text())["lossless"] == 1
    assert owned("container") == [] and owned("network") == []
