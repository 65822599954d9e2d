"""Clock recovery and one-way delay checked against the ground truth: the REAL board-emu with a clock
offset and drift drawn at random here, an emulated asymmetric network path (--path-*, userspace delay
lines in board-emu) and its truth log (--truth-log), the lab's time-echo service
(orchestrator.clients.time_echo), a plain-TCP Mosquitto, the RUN sent by orchestrator.publishers.board.link
and the estimate of orchestrator.analysis.clock.

Truth log (board-emu --truth-log): a "# ..." line with what was injected, the column line, then rows
kind,seq,true_us,board_us - send (PUBLISH stamped: true = host CLOCK_REALTIME, board = its t_send_us),
due (when the path released it: send + the drawn delay, FIFO), wire (its bytes handed to the socket:
due + the host's scheduling latency), t1 and t4 (a clock exchange's board stamps).
The time-echo service stamps t2, t3 on the host's CLOCK_REALTIME: the lab's clock IS the true clock."""

from __future__ import annotations

import csv
import random
import re
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fwtest_support import REPO, HostBuild, Pki

from orchestrator.analysis.clock import ClockEstimate, TimeSample, estimate_clock, one_way_delay_available
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.lines import ClockSample, Done, Handshake, Msg
from orchestrator.publishers.board.link import BoardLink

pytestmark = pytest.mark.timing  # board-emu's delay line and clock against the truth log: ahead of the host's load

CHACHA_OPENSSL = "ECDHE-ECDSA-CHACHA20-POLY1305"
CHACHA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
# Loopback and scheduling on top of a hold, for the medians (the lower limits are exact).
SLACK_US = 1000


@dataclass(frozen=True)
class Row:
    kind: str
    seq: int
    true_us: int
    board_us: int


@dataclass
class Truth:
    comment: str
    rows: list[Row]

    def kind(self, kind: str) -> list[Row]:
        return [r for r in self.rows if r.kind == kind]

    def by_board(self, kind: str) -> dict[int, Row]:
        return {r.board_us: r for r in self.kind(kind)}

    def by_seq(self, kind: str) -> dict[int, Row]:
        return {r.seq: r for r in self.kind(kind)}


def read_truth(path: Path) -> Truth:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# board-emu truth log v1: "), lines[:2]
    assert lines[1] == "kind,seq,true_us,board_us"
    rows = [Row(k, int(s), int(t), int(b)) for k, s, t, b in csv.reader(lines[2:])]
    return Truth(lines[0][2:], rows)


@pytest.fixture
def time_echo() -> Iterator[int]:
    """The lab's time-echo service as the lab runs it (``python -m orchestrator.clients.time_echo``)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.clients.time_echo", "--host", "127.0.0.1",
                             "--port", "0"], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    found = re.search(r"listening on 127\.0\.0\.1:(\d+)", first)
    assert found, f"time_echo printed {first!r}"
    yield int(found.group(1))
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def path_args(up_us: int, up_jitter_us: int, down_us: int, down_jitter_us: int) -> list[str]:
    return ["--path-up-us", str(up_us), "--path-up-jitter-us", str(up_jitter_us),
            "--path-down-us", str(down_us), "--path-down-jitter-us", str(down_jitter_us)]


def run(link: BoardLink, cell: p.RunCell) -> list:
    link.wait_ready(timeout_s=10)
    link.send_run(cell)
    return list(link.run_lines(15))


def clock_samples(lines: list, phase: str) -> list[ClockSample]:
    return [x for x in lines if isinstance(x, ClockSample) and x.phase == phase]


def as_sample(c: ClockSample) -> TimeSample:
    return TimeSample(c.t1_us, c.t2_us, c.t3_us, c.t4_us)


def true_offset(c: ClockSample, truth: Truth) -> float:
    """lab - board at the exchange's board midpoint (t1 + t4) / 2, from the truth rows of t1 and t4."""
    t1 = truth.by_board("t1")[c.t1_us]
    t4 = truth.by_board("t4")[c.t4_us]
    return ((t1.true_us - t1.board_us) + (t4.true_us - t4.board_us)) / 2


def estimate(lines: list) -> ClockEstimate:
    return estimate_clock([as_sample(c) for c in clock_samples(lines, "pre")],
                          [as_sample(c) for c in clock_samples(lines, "post")])


def random_clock() -> tuple[int, int, float]:
    """(seed, offset_us, drift_ppm) drawn at random; the seed is in every assertion's message."""
    seed = random.SystemRandom().randrange(1, 2**31)
    rng = random.Random(seed)
    return seed, rng.randint(-3_600_000_000, 3_600_000_000), round(rng.uniform(-100.0, 100.0), 3)


# Up 3 ms +- 1 ms (2 ms + uniform [0, 2] ms), down 0.5 ms +- 0.2 ms (0.3 ms + uniform [0, 0.4] ms).
UP_US, UP_JITTER_US, DOWN_US, DOWN_JITTER_US = 2000, 2000, 300, 400
# The true uplink median (send to wire) must lie within this of the configured 3 ms under `make test`'s load. The
# draw's own median is off by ~36 us (1 sigma of 400 uniform draws over 2 ms, so 300 us is ~8 sigma); the rest is
# how late the holds end. This test is a `timing` test: as root it runs at niceness -5 (tests/conftest.py), ahead
# of make test's load (the docker half at 0 beside the rest niced 10), where a hold that is due ends on time at the
# median (late p50 0-1 us in every run measured here that was not swamped); a delay line that releases late (a
# coarse timer, a release on the next tick, a hold that waits for the next send) moves the median by more. Measured
# (issue 38) on a 2-core machine shared with other engineers' builds and tests (load average 12-14), beside two busy
# loops at niceness 0 with the test niced 10 as make test runs it: the true median off by +443, +450, +990, +120 and
# +1289 us in 5 runs (late p50 1, 1, 1033, 0, 1350 us); without the busy loops +204, +330, +3884, +1276, +3006 us.
# That load is several times make test's, and it also fails this test's clock-exchange median check above (4 of the
# 5 runs beside the loops); the bound is not widened for it: a host that busy gives no true figures to check.
UPLINK_MEDIAN_BOUND_US = 300


def test_clock_estimate_and_uplink_delay_are_right_against_the_truth(board_emu, broker_factory, time_echo: int,
                                                                     tmp_path: Path) -> None:
    seed, offset_us, drift_ppm = random_clock()
    why = f"seed={seed} offset_us={offset_us} drift_ppm={drift_ppm}"
    truth_path = tmp_path / "truth.csv"
    broker = broker_factory(CHACHA_OPENSSL)
    emu = board_emu("--clock-offset-us", str(offset_us), "--drift-ppm", str(drift_ppm), "--seed", str(seed),
                    *path_args(UP_US, UP_JITTER_US, DOWN_US, DOWN_JITTER_US), "--truth-log", str(truth_path))
    samples = 400  # the median of 400 uniform draws over 2 ms is off by ~36 us (1 sigma)
    cell = p.RunCell(id="path-1", host="127.0.0.1", port=broker.plain_port, transport="plain", payload=65,
                     samples=samples, interval_us=5000, sync_host="127.0.0.1", sync_port=time_echo, sync_count=16)
    with BoardLink(emu.pty) as link:
        lines = run(link, cell)
    assert lines[-1] == Done(samples, "path-1"), why
    assert truth_path.stat().st_mode & 0o777 == 0o600
    truth = read_truth(truth_path)
    assert f"clock_offset_us={offset_us} " in truth.comment and f"path_up_us={UP_US} " in truth.comment
    assert "jitter=uniform" in truth.comment and f"seed={seed} " in truth.comment

    # The clock exchanges: the holds sit between t1 and t2 (up) and between t3 and t4 (down).
    # Exact below (2 us: truncation); above, a busy host adds its scheduling, so the medians are checked.
    clocks = [x for x in lines if isinstance(x, ClockSample)]
    assert len(clocks) == 32, why
    ups = [c.t2_us - truth.by_board("t1")[c.t1_us].true_us for c in clocks]
    downs = [truth.by_board("t4")[c.t4_us].true_us - c.t3_us for c in clocks]
    assert min(ups) >= UP_US - 2 and min(downs) >= DOWN_US - 2, (why, ups, downs)
    assert statistics.median(ups) <= UP_US + UP_JITTER_US + SLACK_US, (why, ups)
    assert statistics.median(downs) <= DOWN_US + DOWN_JITTER_US + SLACK_US, (why, downs)

    # Every exchange's offset, and each phase's estimate, is within its bound of the true offset.
    ratios = []
    for c in clocks:
        s = as_sample(c)
        error = s.offset_us - true_offset(c, truth)
        assert abs(error) <= s.bound_us, (why, c, error, s.bound_us)
        ratios.append(abs(error) / s.bound_us)
    est = estimate(lines)
    for phase in (est.pre, est.post):
        best = next(c for c in clock_samples(lines, phase.phase) if as_sample(c).midpoint_us == phase.at_board_us)
        error = phase.offset_us - true_offset(best, truth)
        assert abs(error) <= phase.bound_us, (why, phase, error)
    assert abs(est.drift_ppm - (-drift_ppm)) <= est.drift_bound_ppm, (why, est)  # board fast = lab - board falls

    # Every send time mapped board -> lab is within its bound of the true send time.
    msgs = [m for m in lines if isinstance(m, Msg)]
    sends, wires = truth.by_seq("send"), truth.by_seq("wire")
    assert [m.seq for m in msgs] == list(range(samples)) and sorted(sends) == sorted(wires) == list(range(samples))
    worst = 0.0
    for m in msgs:
        assert sends[m.seq].board_us == m.t_send_us, (why, m)
        mapped = est.to_lab(m.t_send_us)
        error = mapped.lab_us - sends[m.seq].true_us
        assert abs(error) <= mapped.bound_us, (why, m, error, mapped)
        worst = max(worst, abs(error) / mapped.bound_us)

    # The true uplink delay of the MQTT data. drawn = due - send, the path's model (delay + uniform
    # jitter, FIFO); true = wire - send = drawn + how late the hold ended (late = wire - due).
    configured = UP_US + UP_JITTER_US / 2
    dues = truth.by_seq("due")
    drawn = [dues[s].true_us - sends[s].true_us for s in range(samples)]
    delays = [wires[s].true_us - sends[s].true_us for s in range(samples)]
    late = sorted(wires[s].true_us - dues[s].true_us for s in range(samples))
    assert min(drawn) >= UP_US and late[0] >= -2, (why, min(drawn), late[0])
    assert all(wires[s].true_us <= wires[s + 1].true_us for s in range(samples - 1)), why  # FIFO
    assert abs(statistics.median(drawn) - configured) <= 300, (why, statistics.median(drawn))
    median = statistics.median(delays)
    late_share = sum(x > 300 for x in late) / samples
    # What the lab would report: the arrival (the wire time, on loopback) minus the mapped send time.
    measured = statistics.median(wires[m.seq].true_us - est.to_lab(m.t_send_us).lab_us for m in msgs)
    verdict = one_way_delay_available(est.bound_us, measured)
    evidence = (f"uplink median true {median:.0f} us, drawn {statistics.median(drawn):.0f} us (configured "
                f"{configured:.0f} +- {UPLINK_MEDIAN_BOUND_US} us); holds ended late by p50 {late[samples // 2]} us, "
                f"p90 {late[samples * 9 // 10]} us, max {late[-1]} us, {late_share:.1%} > 0.3 ms")
    print(f"\n{why}: offset error / bound worst {max(ratios):.2f} (pre {est.pre.bound_us:.0f} us, post "
          f"{est.post.bound_us:.0f} us); mapped send worst {worst:.2f} of bound; {evidence}; measured one-way "
          f"median {measured:.0f} us; {verdict.reason}")
    # Late holds are what a late delay line produces: they fail the test whatever made them late (no xfail).
    assert abs(median - configured) <= UPLINK_MEDIAN_BOUND_US, f"{why}: the delay line is late: {evidence}"


def test_the_delay_line_does_not_slow_the_board_and_keeps_the_order(board_emu, broker_factory,
                                                                    tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.csv"
    broker = broker_factory(CHACHA_OPENSSL)
    emu = board_emu(*path_args(UP_US, UP_JITTER_US, DOWN_US, DOWN_JITTER_US), "--seed", "3",
                    "--truth-log", str(truth_path))
    cell = p.RunCell(id="b2b", host="127.0.0.1", port=broker.plain_port, transport="plain", payload=65, samples=50,
                     interval_us=0)  # back to back: every message is stamped well before the first leaves
    with BoardLink(emu.pty) as link:
        lines = run(link, cell)
    assert lines[-1] == Done(50, "b2b")
    truth = read_truth(truth_path)
    sends, wires = truth.by_seq("send"), truth.by_seq("wire")
    # not one message per delay: held one by one, 50 back-to-back sends would span 49 x UP_US (98 ms); they take
    # 0.5-1.6 ms here. Counting the sends before the first release (> 5 of 50) failed under load (CI rehearsal: 2),
    # where a preempted sender took longer than one UP_US, not 49
    span_us = max(x.true_us for x in sends.values()) - min(x.true_us for x in sends.values())
    assert span_us < 49 * UP_US / 2, span_us
    dues = truth.by_seq("due")
    assert all(dues[s].true_us <= dues[s + 1].true_us + 2 for s in range(49))  # FIFO (+-1 us: a converted time)
    assert all(wires[s].true_us <= wires[s + 1].true_us for s in range(49))
    assert all(wires[s].true_us - sends[s].true_us >= UP_US for s in range(50))


def test_qos1_over_tls_through_the_path(board_emu, broker_factory, pki: Pki, tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.csv"
    broker = broker_factory(CHACHA_OPENSSL)
    emu = board_emu(*path_args(1000, 500, 1000, 500), "--truth-log", str(truth_path))
    cell = p.RunCell(id="tls-q1", host="127.0.0.1", port=broker.tls_port, transport="tls", payload=65, samples=5,
                     interval_us=0, qos=1, ciphers=(CHACHA,), ca=pki.ca.read_text(), server_name="localhost",
                     connect_timeout_ms=2000)
    with BoardLink(emu.pty) as link:
        lines = run(link, cell)
    assert lines[-1] == Done(5, "tls-q1")
    shake = next(x for x in lines if isinstance(x, Handshake))
    assert shake.suite == CHACHA and shake.connack_ms is not None
    assert shake.connack_ms >= 2.0  # CONNECT held on the way up, CONNACK on the way down
    truth = read_truth(truth_path)
    sends, wires = truth.by_seq("send"), truth.by_seq("wire")
    # QoS 1: the next PUBLISH waits for the PUBACK, which comes back over the downlink.
    assert all(sends[s + 1].true_us - wires[s].true_us >= 1000 for s in range(4))
    assert all(wires[s].true_us - sends[s].true_us >= 1000 for s in range(5))


def test_bad_path_options_are_refused(host_build: HostBuild, tmp_path: Path) -> None:
    for args, named in ((["--path-up-us", "-1"], "--path-up-us -1"),
                        (["--path-down-jitter-us", "x"], "--path-down-jitter-us x"),
                        (["--truth-log", str(tmp_path / "missing" / "truth.csv")], "--truth-log")):
        done = subprocess.run([str(host_build.board_emu), *args], capture_output=True, text=True, timeout=10,
                              check=False)
        assert done.returncode == 2 and "board-emu: error InvalidArgument: " in done.stderr and named in done.stderr


def test_jitter_wider_than_the_delay_leaves_one_way_delay_unavailable(board_emu, broker_factory, time_echo: int,
                                                                       tmp_path: Path) -> None:
    # Jitter twice the delay up, twenty times down. The bound is at least half the quietest round trip
    # ((d_up + d_down) / 2 >= 300 us), the one-way delay of the messages is ~0.6 ms: far above 25 %.
    seed, offset_us, drift_ppm = random_clock()
    why = f"seed={seed} offset_us={offset_us} drift_ppm={drift_ppm}"
    truth_path = tmp_path / "truth.csv"
    broker = broker_factory(CHACHA_OPENSSL)
    emu = board_emu("--clock-offset-us", str(offset_us), "--drift-ppm", str(drift_ppm), "--seed", str(seed),
                    *path_args(300, 600, 300, 6000), "--truth-log", str(truth_path))
    cell = p.RunCell(id="wide", host="127.0.0.1", port=broker.plain_port, transport="plain", payload=65, samples=50,
                     interval_us=5000, sync_host="127.0.0.1", sync_port=time_echo, sync_count=8)
    with BoardLink(emu.pty) as link:
        lines = run(link, cell)
    assert lines[-1] == Done(50, "wide"), why
    truth = read_truth(truth_path)
    est = estimate(lines)
    wires = truth.by_seq("wire")
    msgs = [m for m in lines if isinstance(m, Msg)]
    measured = statistics.median(wires[m.seq].true_us - est.to_lab(m.t_send_us).lab_us for m in msgs)
    verdict = one_way_delay_available(est.bound_us, measured)
    assert not verdict.available, (why, verdict)
    assert "not available" in verdict.reason
    for c in [x for x in lines if isinstance(x, ClockSample)]:  # and the bound still holds
        assert abs(as_sample(c).offset_us - true_offset(c, truth)) <= as_sample(c).bound_us, (why, c)
    print(f"\n{why}: {verdict.reason}")
