"""The board-clock estimator (orchestrator/analysis/clock.py) and the time-echo service
(orchestrator/clients/time_echo.py).

1. A simulation draws a board clock (offset and drift, from the test's seed, never shown to the
   estimator), asymmetric path delays with jitter and WiFi-like spikes, the lab's hold time, lost
   exchanges and microsecond truncation; the TRUE error of every offset, drift and mapped time
   must be within the bound the estimator reports, over many draws.
2. The real C++ client (firmware/platformio/host/src/probes/time_sync_probe.cpp over the core's
   time_sync) against the real Python server on 127.0.0.1.
"""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from orchestrator.analysis import clock
from orchestrator.analysis.clock import ClockSyncError, TimeSample, TooFewSamplesError
from orchestrator.clients import time_echo
from tests.skips import skip_or_fail

REPO = Path(__file__).resolve().parents[3]
FW = REPO / "firmware" / "platformio"
DRAWS = 3000


# ------------------------------------------------------------------ the simulated board and path
@dataclass(frozen=True)
class Board:
    """lab = board + offset0 + r x (board - b0): a board clock with a constant rate difference r."""

    offset0_us: float
    r: float
    b0_us: float

    def theta(self, b: float) -> float:  # the true offset (lab - board) at board time b
        return self.offset0_us + self.r * (b - self.b0_us)

    def lab(self, b: float) -> float:
        return b + self.theta(b)

    def board(self, lab: float) -> float:
        return (lab - self.offset0_us + self.r * self.b0_us) / (1 + self.r)


@dataclass(frozen=True)
class Path_:
    fwd_base_us: float
    back_base_us: float
    jitter_us: float
    spike_p: float
    drop_p: float


def _delay(rng: np.random.Generator, base: float, p: Path_) -> float:
    d = base + rng.exponential(p.jitter_us)
    if rng.random() < p.spike_p:  # a WiFi retry / power-save wake-up
        d += rng.uniform(5_000, 80_000)
    return d


def _phase(rng: np.random.Generator, board: Board, path: Path_, start_b: float, n: int) -> list[TimeSample]:
    out, b = [], start_b
    for _ in range(n):
        l1 = board.lab(b)
        l2 = l1 + _delay(rng, path.fwd_base_us, path)
        l3 = l2 + rng.uniform(5, 3_000)  # the lab's hold time
        l4 = l3 + _delay(rng, path.back_base_us, path)
        b4 = board.board(l4)
        if rng.random() >= path.drop_p:
            out.append(TimeSample(math.floor(b), math.floor(l2), math.floor(l3), math.floor(b4)))
        b = b4 + 10_000
    return out


def _draw(rng: np.random.Generator) -> tuple[Board, list[TimeSample], list[TimeSample]]:
    b0 = 1.7645e15 + rng.uniform(0, 1e12)
    board = Board(offset0_us=rng.uniform(-3e9, 3e9), r=rng.uniform(-450e-6, 450e-6), b0_us=b0)
    path = Path_(fwd_base_us=rng.uniform(50, 4_000), back_base_us=rng.uniform(50, 4_000),
                 jitter_us=rng.uniform(1, 2_000), spike_p=rng.uniform(0, 0.3), drop_p=rng.uniform(0, 0.4))
    start = b0 + rng.uniform(-5e6, 5e6)
    pre = _phase(rng, board, path, start, 24)
    post = _phase(rng, board, path, start + rng.uniform(5e6, 900e6), 24)
    return board, pre, post


def _worst_ratios(seed: int, draws: int) -> dict[str, float]:
    """The largest true error / reported bound over all draws, per quantity."""
    rng = np.random.default_rng(seed)
    worst = {"sample": 0.0, "phase": 0.0, "drift": 0.0, "mapped": 0.0}
    for _ in range(draws):
        board, pre, post = _draw(rng)
        for s in pre + post:
            worst["sample"] = max(worst["sample"], abs(s.offset_us - board.theta(s.midpoint_us)) / s.bound_us)
        try:
            est = clock.estimate_clock(pre, post)
        except TooFewSamplesError:
            continue
        for ph in (est.pre, est.post):
            worst["phase"] = max(worst["phase"], abs(ph.offset_us - board.theta(ph.at_board_us)) / ph.bound_us)
        worst["drift"] = max(worst["drift"], abs(est.drift_ppm - board.r * 1e6) / est.drift_bound_ppm)
        span = est.post.at_board_us - est.pre.at_board_us
        for b in est.pre.at_board_us + span * rng.uniform(-0.05, 1.05, 20):
            m = est.to_lab(b)
            worst["mapped"] = max(worst["mapped"], abs(m.lab_us - board.lab(b)) / m.bound_us)
    return worst


def test_true_error_is_within_the_reported_bound_over_many_draws() -> None:
    worst = _worst_ratios(seed=20251201, draws=DRAWS)
    print(f"worst true error / bound over {DRAWS} draws: {worst}")
    assert all(v <= 1.0 for v in worst.values()), worst


def test_the_bound_is_tight_when_the_whole_round_trip_is_one_way() -> None:
    """All of the delay on the way out, none back: the error is the whole bound (minus the allowances)."""
    rng = np.random.default_rng(7)
    board = Board(offset0_us=-1.25e9, r=0.0, b0_us=1.7645e15)
    path = Path_(fwd_base_us=3_000, back_base_us=0, jitter_us=1e-9, spike_p=0, drop_p=0)
    est = clock.estimate_phase(_phase(rng, board, path, board.b0_us, 8), "pre")
    error = abs(est.offset_us - board.theta(est.at_board_us))
    assert est.bound_us - 5 <= error <= est.bound_us
    assert est.rtt_min_us == pytest.approx(3_000, abs=2)


def test_the_drift_allowance_is_needed_for_a_long_one_way_round_trip() -> None:
    """With the lab's clock 450 ppm fast, an 80 ms round trip all one way is off by more than rtt / 2."""
    rng = np.random.default_rng(11)
    board = Board(offset0_us=0.0, r=450e-6, b0_us=1.7645e15)
    path = Path_(fwd_base_us=80_000, back_base_us=0, jitter_us=1e-9, spike_p=0, drop_p=0)
    for s in _phase(rng, board, path, board.b0_us, 4):
        error = abs(s.offset_us - board.theta(s.midpoint_us))
        assert s.rtt_us / 2 + 10 < error <= s.bound_us


def test_no_delay_at_all_gives_the_offset_exactly() -> None:
    board = Board(offset0_us=123_456.0, r=0.0, b0_us=1.7645e15)
    b = board.b0_us
    samples = [TimeSample(int(b + i), int(board.lab(b + i)), int(board.lab(b + i)) + 7, int(b + i) + 7)
               for i in range(0, 40, 10)]
    est = clock.estimate_phase(samples, "pre")
    assert est.offset_us == 123_456.0 and est.rtt_min_us == 0
    assert est.bound_us == pytest.approx(2 * clock.RESOLUTION_US, abs=0.01)


def test_the_smallest_round_trip_is_chosen_and_counted() -> None:
    slow = TimeSample(0, 5_000, 5_100, 9_100)  # rtt 9000
    quick = TimeSample(20_000, 24_000, 24_050, 20_250)  # rtt 200
    est = clock.estimate_phase([slow, quick, slow, slow], "post")
    assert est.rtt_min_us == 200 and est.n_samples == 4 and est.phase == "post"
    assert est.offset_us == quick.offset_us and est.at_board_us == 20_125


# ------------------------------------------------------------------ refusals, with their names
def _samples(start: int, n: int = 4, offset: int = 1_000) -> list[TimeSample]:
    return [TimeSample(start + i * 10_000, start + i * 10_000 + offset + 500, start + i * 10_000 + offset + 540,
                       start + i * 10_000 + 1_040) for i in range(n)]


def test_too_few_samples_is_a_named_error() -> None:
    with pytest.raises(TooFewSamplesError, match="the post clock exchange has 3 valid sample"):
        clock.estimate_clock(_samples(0), _samples(10_000_000, n=3))
    with pytest.raises(TooFewSamplesError, match="pre clock exchange has 0"):
        clock.estimate_clock([], _samples(0))
    assert issubclass(TooFewSamplesError, ClockSyncError)


def test_impossible_swapped_and_stepped_exchanges_are_refused() -> None:
    bad = _samples(0)[:3] + [TimeSample(100, 200, 150, 300)]
    with pytest.raises(ClockSyncError, match="exchange 3 of the pre phase is impossible"):
        clock.estimate_phase(bad, "pre")
    with pytest.raises(ClockSyncError, match="not after the pre one"):
        clock.estimate_clock(_samples(10_000_000), _samples(0))
    with pytest.raises(ClockSyncError, match="beyond the 500 ppm"):  # a 10 ms step over 10 s = 1000 ppm
        clock.estimate_clock(_samples(0), _samples(10_000_000, offset=11_000))


def test_mapping_interpolates_between_the_anchors() -> None:
    est = clock.estimate_clock(_samples(0), _samples(10_000_000, offset=2_000))
    assert est.drift_ppm == pytest.approx(100.0)  # 1000 us more offset over 10 s
    mid = (est.pre.at_board_us + est.post.at_board_us) / 2
    m = est.to_lab(mid)
    assert m.lab_us == pytest.approx(mid + (est.pre.offset_us + est.post.offset_us) / 2)
    assert m.bound_us == pytest.approx((est.pre.bound_us + est.post.bound_us) / 2)
    assert est.to_lab(est.pre.at_board_us - 10_000_000).bound_us > est.bound_us  # extrapolation widens it
    d = est.as_dict()
    assert d["pre"]["n_samples"] == 4 and d["max_drift_ppm_assumed"] == clock.MAX_DRIFT_PPM


# ------------------------------------------------------------------ the decision helper
def test_one_way_delay_is_available_only_when_the_bound_is_a_quarter_of_it_or_less() -> None:
    ok = clock.one_way_delay_available(1_000, 4_000)
    assert ok.available and "25 % of the median" in ok.reason
    wifi = clock.one_way_delay_available(1_900, 4_000)  # a 3.8 ms WiFi round trip against a 4 ms delay
    assert not wifi.available and "not available" in wifi.reason and "PUBACK" in wifi.reason
    assert not clock.one_way_delay_available(100, -50).available
    assert clock.one_way_delay_available(1_900, 4_000, ratio=0.5).available
    with pytest.raises(ValueError):
        clock.one_way_delay_available(1, 1, ratio=0)


# ------------------------------------------------------------------ the time-echo service in-process
@pytest.fixture
def echo() -> Iterator[time_echo.TimeEcho]:
    server = time_echo.TimeEcho("127.0.0.1", 0)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            server.serve_one()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server
    stop.set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"wake up", server.address)
    thread.join(timeout=5)
    server.close()


def _request(seq: int, t1: int) -> bytes:
    return time_echo.WIRE.pack(time_echo.MAGIC, 1, time_echo.KIND_REQUEST, 0, seq, 0, t1, 0, 0)


def test_echo_answers_requests_and_ignores_garbage(echo: time_echo.TimeEcho) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.connect(echo.address)
        good = _request(7, 1_764_470_000_000_000)
        for junk in (b"", b"hello", good + b"x", good[:-1], b"XBTS" + good[4:], good[:4] + b"\x02" + good[5:],
                     time_echo.encode_reply(7, 1, 2, 3, kernel_rx=False)):
            s.send(junk)
        before = time.time_ns() // 1000
        s.send(good)
        reply = s.recv(100)
        after = time.time_ns() // 1000
        with pytest.raises(TimeoutError):
            s.settimeout(0.2)
            s.recv(100)  # only the valid request was answered
    magic, version, kind, flags, seq, _r, t1, t2, t3 = time_echo.WIRE.unpack(reply)
    assert (magic, version, kind, seq, t1) == (b"TBTS", 1, 2, 7, 1_764_470_000_000_000)
    assert before <= t2 <= t3 <= after
    assert flags == (1 if echo.option is not None else 0)
    assert echo.counts.ignored == 7 and echo.counts.answered == 1


def test_parse_request_refuses_every_wrong_field() -> None:
    good = _request(1, 2)
    assert time_echo.parse_request(good) == (1, 2)
    for bad in (good[:39], good + b"\0", b"TBTX" + good[4:], good[:4] + b"\x02" + good[5:],
                good[:5] + b"\x02" + good[6:]):
        assert time_echo.parse_request(bad) is None


# ------------------------------------------------------------------ end to end: C++ client, Python server
@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """time_sync_probe compiled straight from the core's and the host's sources (no mbedTLS needed)."""
    gxx = shutil.which("g++")
    if gxx is None:
        skip_or_fail("g++ not found: apt-get install -y g++")
    out = tmp_path_factory.mktemp("probe") / "time_sync_probe"
    core, common = FW / "lib" / "testbed_core" / "src", FW / "host" / "src" / "common"
    argv = [gxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Werror", f"-I{core}",
            f"-I{common}", str(core / "time_sync.cpp"), str(core / "tb_error.cpp"), str(core / "resolve.cpp"),
            str(common / "posix_udp.cpp"), str(common / "posix_clock.cpp"),
            str(FW / "host" / "src" / "probes" / "time_sync_probe.cpp"), "-o", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture
def echo_process() -> Iterator[int]:
    """``python -m orchestrator.clients.time_echo --port 0`` as its own process; yields its port."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.clients.time_echo", "--host", "127.0.0.1",
                             "--port", "0"], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on 127.0.0.1:" in line, line
        yield int(line.split("127.0.0.1:")[1].split()[0])
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def _run_probe(probe: Path, port: int, *extra: str) -> list[TimeSample]:
    proc = subprocess.run([str(probe), "--host", "127.0.0.1", "--port", str(port), "--count", "16", *extra],
                          capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "t1_us,t2_us,t3_us,t4_us"
    return [TimeSample(*(int(v) for v in line.split(","))) for line in lines[1:]]


def test_cpp_client_against_python_server_on_one_clock(probe: Path, echo_process: int) -> None:
    pre = _run_probe(probe, echo_process)
    post = _run_probe(probe, echo_process)
    assert len(pre) == len(post) == 16  # loopback loses nothing
    est = clock.estimate_clock(pre, post)
    for ph in (est.pre, est.post):  # same host clock: the true offset is 0
        assert abs(ph.offset_us) <= ph.bound_us, ph
        assert ph.bound_us < 5_000, ph
    print(f"loopback: pre {est.pre}, post {est.post}")


def test_cpp_client_finds_an_injected_offset_and_drift(probe: Path, echo_process: int) -> None:
    offset, ppm, origin = 2_500_000, 200.0, time.time_ns() // 1000
    shift = ("--offset-us", str(offset), "--drift-ppm", str(ppm), "--drift-origin-us", str(origin))
    pre = _run_probe(probe, echo_process, *shift)
    time.sleep(1.5)
    post = _run_probe(probe, echo_process, *shift)
    est = clock.estimate_clock(pre, post)
    # board = host + offset + (host - origin) x ppm, so lab - board at board time b:
    board = Board(offset0_us=-offset, r=-ppm * 1e-6 / (1 + ppm * 1e-6), b0_us=origin + offset)
    for ph in (est.pre, est.post):
        assert abs(ph.offset_us - board.theta(ph.at_board_us)) <= ph.bound_us + 1, ph
    assert abs(est.drift_ppm + ppm) <= est.drift_bound_ppm, est
    b = (est.pre.at_board_us + est.post.at_board_us) / 2
    assert abs(est.to_lab(b).lab_us - board.lab(b)) <= est.to_lab(b).bound_us + 1


def test_cpp_client_reports_a_missing_server(probe: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a port nobody answers on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        proc = subprocess.run([str(probe), "--host", "127.0.0.1", "--port", str(port), "--count", "2"],
                              capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.startswith("time_sync_probe: error TimeSyncNoReply: none of 2 exchanges"), proc.stderr
