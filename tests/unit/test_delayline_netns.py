"""testbed-delayline (images/netadmin/delayline/) on a real NFQUEUE, in network namespaces this test makes.

    a [10.97.0.1 a_if] <-veth-> [b_if 10.97.0.2] b

The rule sits in ``a``'s mangle POSTROUTING, ``-o a_if -j NFQUEUE --queue-num N`` without
``--queue-bypass`` (fail closed), as it will on a container's eth0; the line runs in ``a``. Both
namespaces share the host's clocks, so a UDP sender in ``a`` stamping CLOCK_REALTIME and a receiver in
``b`` reading the kernel's receive timestamp (SO_TIMESTAMPNS) give each packet's one-way delay.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.skips import tools_gate

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "images" / "netadmin" / "delayline"
PORT = 5011
_counter = itertools.count()


def _problem() -> str | None:
    for tool in ("ip", "iptables", "make", "cc", "pkg-config"):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install iproute2 iptables make gcc pkg-config libnetfilter-queue-dev)"
    if subprocess.run(["pkg-config", "--exists", "libnetfilter_queue"], check=False).returncode:
        return "needs libnetfilter-queue-dev"
    return None


_tools = tools_gate(_problem)  # before the module's other fixtures: skip, or fail under CI=true


def sh(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


TOOL = Path(__file__).resolve().parents[2] / "images" / "netadmin" / "delayline" / "test" / "traffic.py"


@pytest.fixture(scope="module")
def delayline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built out of tree with the folder's own Makefile; its C tests (`make check`) run too."""
    build = tmp_path_factory.mktemp("delayline-build")
    out = sh("make", "-C", str(SOURCE), f"BUILD_DIR={build}", "all", "check", check=False, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " passed, 0 failed" in out.stdout
    return build / "testbed-delayline"


@dataclass
class Pair:
    tag: str
    tool: Path
    a_ip: str = "10.97.0.1"
    b_ip: str = "10.97.0.2"
    queue: int = 7
    procs: list[subprocess.Popen[str]] = field(default_factory=list)  # killed when the pair goes

    @property
    def a(self) -> str:
        return f"{self.tag}-a"

    @property
    def b(self) -> str:
        return f"{self.tag}-b"

    @property
    def a_if(self) -> str:
        return f"{self.tag}a"

    def inside(self, ns: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]

    def rule(self, action: str = "-A") -> None:
        """The fail-closed rule: no --queue-bypass."""
        sh(*self.inside(self.a, "iptables", "-t", "mangle", action, "POSTROUTING", "-o", self.a_if,
                        "-j", "NFQUEUE", "--queue-num", str(self.queue)))

    def tool_argv(self, ns: str, *args: object) -> list[str]:
        return self.inside(ns, sys.executable, str(self.tool), *map(str, args))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    tool = TOOL
    pair = Pair(tag=f"dl{os.getpid() % 10000}{next(_counter)}", tool=tool)
    b_if = f"{pair.tag}b"
    steps = [("netns", "add", pair.a), ("netns", "add", pair.b),
             ("link", "add", pair.a_if, "type", "veth", "peer", "name", b_if),
             ("link", "set", pair.a_if, "netns", pair.a), ("link", "set", b_if, "netns", pair.b),
             ("-n", pair.a, "addr", "add", f"{pair.a_ip}/24", "dev", pair.a_if),
             ("-n", pair.b, "addr", "add", f"{pair.b_ip}/24", "dev", b_if),
             *[("-n", ns, "link", "set", dev, "up") for ns, dev in
               ((pair.a, pair.a_if), (pair.b, b_if), (pair.a, "lo"), (pair.b, "lo"))]]
    try:
        for step in steps:
            sh("ip", *step)
        for ns in (pair.a, pair.b):  # no IPv6 chatter: only the test's packets meet the rule
            sh(*pair.inside(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"))
        yield pair
    finally:
        for proc in pair.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for ns in (pair.a, pair.b):
            sh("ip", "netns", "del", ns, check=False)


@dataclass
class Line:
    """The delay line running in namespace a; `stop()` sends SIGTERM and returns the final stats."""
    proc: subprocess.Popen[str]
    stats_path: Path
    final: dict[str, object] = field(default_factory=dict)

    def stats(self) -> dict:
        return json.loads(self.stats_path.read_text())

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=10)
        assert self.proc.returncode == 0, err
        self.final = self.stats()
        return self.final


def start_line(pair: Pair, binary: Path, tmp_path: Path, *args: object) -> Line:
    stats = tmp_path / f"stats-{next(_counter)}.json"
    argv = pair.inside(pair.a, str(binary), "--queue", str(pair.queue), "--stats", str(stats), *map(str, args))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pair.procs.append(proc)
    deadline = time.monotonic() + 10
    while not stats.exists():  # the first write follows the queue's binding
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"delay line did not start: {proc.communicate()[1]}")
        time.sleep(0.02)
    return Line(proc=proc, stats_path=stats)


def rtt(pair: Pair, count: int, timeout_s: float = 1.0) -> dict:
    return json.loads(sh(*pair.tool_argv(pair.a, "rtt", pair.b_ip, PORT, count, timeout_s)).stdout)


@pytest.fixture
def echo(pair: Pair) -> Iterator[None]:
    proc = subprocess.Popen(pair.tool_argv(pair.b, "echo", PORT), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.kill()
        proc.wait()


def one_way(pair: Pair, count: int, interval_s: float) -> list[tuple[int, float]]:
    """(seq, one-way delay ms) in arrival order, for `count` UDP packets sent a -> b."""
    recv = subprocess.Popen(pair.tool_argv(pair.b, "recv", PORT, 2.0), stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        sh(*pair.tool_argv(pair.a, "send", pair.b_ip, PORT, count, interval_s), timeout=600)
        out, _ = recv.communicate(timeout=120)
    finally:
        recv.kill()
    return [(seq, (received - sent) / 1e6) for seq, sent, received in json.loads(out)]


def assert_invariant(stats: dict) -> None:
    assert stats["accepted"] + stats["dropped"] + stats["in_flight"] == stats["queued"], stats


def test_floor_adds_at_most_0_3_ms_median(pair: Pair, delayline: Path, tmp_path: Path, echo: None) -> None:
    rtt(pair, 200)  # warm up ARP and caches
    bare = rtt(pair, 2000)["rtt_ms"]
    pair.rule()
    line = start_line(pair, delayline, tmp_path, "--delay-ms", 0)
    lined = rtt(pair, 2000)
    final = line.stop()
    added = statistics.median(lined["rtt_ms"]) - statistics.median(bare)
    p99 = float(np.percentile(lined["rtt_ms"], 99) - np.percentile(bare, 99))
    print(f"floor: median RTT {statistics.median(bare):.3f} ms bare, "
          f"{statistics.median(lined['rtt_ms']):.3f} ms through the line: {added:+.3f} ms (p99 {p99:+.3f})")
    assert lined["lost"] == 0
    assert added <= 0.3
    assert_invariant(final)
    assert final["queued"] == final["accepted"] == 2000 and final["in_flight"] == 0
    assert final["state"] == "exited" and final["healthy"] is True and final["overflows"] == 0


def test_normal_5_ms_jitter_2_ms_one_way(pair: Pair, delayline: Path, tmp_path: Path) -> None:
    pair.rule()
    line = start_line(pair, delayline, tmp_path, "--delay-ms", 5, "--jitter-ms", 2, "--distribution", "normal",
                      "--order", "reorder", "--seed", 1)
    rows = one_way(pair, 1000, 0.002)
    final = line.stop()
    delays = [d for _, d in rows]
    median = statistics.median(delays)
    sigma = 1.4826 * statistics.median(abs(d - median) for d in delays)
    print(f"normal 5 +/- 2 ms: {len(delays)} packets, median {median:.3f} ms, MAD*1.4826 {sigma:.3f} ms, "
          f"min {min(delays):.3f}, max {max(delays):.3f}")
    assert len(delays) == 1000
    assert 4.5 <= median <= 5.5
    assert 1.5 <= sigma <= 2.5
    assert final["distribution"] == "normal" and final["params"]["dist_file"].endswith("normal.dist")
    assert_invariant(final)


def _inversions(seqs: list[int]) -> int:
    highest, late = -1, 0
    for s in seqs:
        if s < highest:
            late += 1
        highest = max(highest, s)
    return late


@pytest.mark.parametrize("order", ["fifo", "reorder"])
def test_order_under_jitter(pair: Pair, delayline: Path, tmp_path: Path, order: str) -> None:
    pair.rule()
    line = start_line(pair, delayline, tmp_path, "--delay-ms", 5, "--jitter-ms", 3, "--order", order,
                      "--seed", 2)
    rows = one_way(pair, 500, 0.001)
    final = line.stop()
    late = _inversions([seq for seq, _ in rows])
    print(f"{order}: {late} of {len(rows)} packets arrived after a later-sent one")
    assert len(rows) == 500 and final["order"] == order
    if order == "fifo":
        assert late == 0
    else:
        assert late >= 50  # 1 ms apart with +/- 3 ms uniform jitter: most pairs can swap


def simulated_interval(p: float, r: float, n: int, runs: int = 4000, seed: int = 5) -> dict[str, tuple]:
    """99 % intervals of loss rate and mean burst length over `runs` simulated runs of n packets of
    netem's chain (1-h = 1, 1-k = 0: a packet is lost when it arrives in Bad; start in Good)."""
    rng = np.random.default_rng(seed)
    bad = np.zeros(runs, dtype=bool)
    lost = np.zeros(runs)
    starts = np.zeros(runs)
    prev = np.zeros(runs, dtype=bool)
    for _ in range(n):
        lost += bad
        starts += bad & ~prev
        prev = bad
        u = rng.random(runs)
        bad = np.where(bad, u >= r, u < p)
    burst = lost / np.maximum(starts, 1)
    return {"loss": tuple(np.quantile(lost / n, [0.005, 0.995])),
            "burst": tuple(np.quantile(burst, [0.005, 0.995]))}


def test_gilbert_elliott_loss_from_profile_numbers(pair: Pair, delayline: Path, tmp_path: Path) -> None:
    n, loss, corr = 20_000, 0.02, 0.25
    p, r = loss * (1 - corr), (1 - loss) * (1 - corr)
    pair.rule()
    line = start_line(pair, delayline, tmp_path, "--loss-pct", 100 * loss, "--loss-correlation-pct",
                      100 * corr, "--seed", 3)
    rows = one_way(pair, n, 0.0002)
    final = line.stop()
    got = np.zeros(n, dtype=bool)
    got[[seq for seq, _ in rows]] = True
    missing = ~got
    bursts = int(np.sum(missing[1:] & ~missing[:-1]) + missing[0])
    rate, mean_burst = missing.mean(), missing.sum() / max(bursts, 1)
    interval = simulated_interval(p, r, n)
    print(f"GE p={p:.4f} r={r:.4f}: lost {missing.sum()} of {n} ({100 * rate:.2f} %, 99 % interval "
          f"{100 * interval['loss'][0]:.2f}..{100 * interval['loss'][1]:.2f}); mean burst {mean_burst:.3f} "
          f"(model 1/r = {1 / r:.3f}, 99 % interval {interval['burst'][0]:.3f}..{interval['burst'][1]:.3f})")
    assert final["queued"] == n and final["dropped"] == missing.sum()  # every missing packet was ours
    assert interval["loss"][0] <= rate <= interval["loss"][1]
    assert interval["burst"][0] <= mean_burst <= interval["burst"][1]
    assert final["params"]["loss"]["p_pct"] == pytest.approx(100 * p)
    assert final["params"]["loss"]["r_pct"] == pytest.approx(100 * r)
    assert_invariant(final)


def test_sigkill_fails_closed(pair: Pair, delayline: Path, tmp_path: Path, echo: None) -> None:
    pair.rule()
    line = start_line(pair, delayline, tmp_path)
    assert rtt(pair, 20)["lost"] == 0
    time.sleep(0.3)  # one more stats write
    line.proc.kill()
    line.proc.wait()
    dead = rtt(pair, 20, timeout_s=0.2)
    stats = line.stats()
    print(f"after SIGKILL: {dead['lost']} of 20 round trips lost; stats say pid {stats['pid']}, "
          f"state {stats['state']}")
    assert dead["lost"] == 20  # no --queue-bypass: nobody bound to the queue means drop
    assert stats["state"] == "running"  # never wrote an orderly end ...
    with pytest.raises(ProcessLookupError):  # ... and its pid is gone: a reader sees a dead line
        os.kill(int(stats["pid"]), 0)
    pair.rule("-D")
    assert rtt(pair, 20)["lost"] == 0  # it was the rule, not the link


def test_sigterm_releases_held_packets_at_once(pair: Pair, delayline: Path, tmp_path: Path) -> None:
    pair.rule()
    line = start_line(pair, delayline, tmp_path, "--delay-ms", 3000)
    recv = subprocess.Popen(pair.tool_argv(pair.b, "recv", PORT, 1.0), stdout=subprocess.PIPE, text=True)
    assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
    sh(*pair.tool_argv(pair.a, "send", pair.b_ip, PORT, 50, 0.001))
    time.sleep(0.3)  # a stats write after the last packet
    held = line.stats()
    final = line.stop()
    rows = json.loads(recv.communicate(timeout=30)[0])
    delays = [(received - sent) / 1e6 for _, sent, received in rows]
    print(f"SIGTERM with {held['in_flight']} held: {len(rows)} of 50 arrived, "
          f"latest after {max(delays):.0f} ms")
    assert held["in_flight"] == 50
    assert len(rows) == 50 and max(delays) < 2000  # released by the exit, not by their 3 s delay
    assert final["accepted"] == 50 and final["in_flight"] == 0 and final["state"] == "exited"


def test_full_queue_drops_and_is_unhealthy(pair: Pair, delayline: Path, tmp_path: Path) -> None:
    pair.rule()
    line = start_line(pair, delayline, tmp_path, "--delay-ms", 1000, "--max-queue", 10)
    sh(*pair.tool_argv(pair.a, "send", pair.b_ip, PORT, 100, 0.0005))
    time.sleep(0.5)
    stats = line.stats()
    line.stop()
    print(f"queue of 10, 100 sent: held {stats['in_flight']}, kernel {stats['kernel']}, "
          f"healthy {stats['healthy']}")
    assert stats["in_flight"] == 10 and stats["kernel"]["queue_dropped"] == 90
    assert stats["healthy"] is False


def test_refuses_bad_options_before_binding(delayline: Path) -> None:
    out = sh(str(delayline), "--queue", "1", "--jitter-ms", "-1", "--order", "lifo", "--ge-r", "5", check=False)
    assert out.returncode == 2
    assert "--jitter-ms: must be a number between 0 and 2147.48 (got -1)" in out.stderr
    assert "--order: must be fifo or reorder (got lifo)" in out.stderr
    assert "--ge-p: is needed with --ge-r/--ge-h/--ge-k" in out.stderr
    sample = sh(str(delayline), "--sample", "3", "--delay-ms", "5", "--jitter-ms", "2", "--distribution",
                "normal", "--seed", "9").stdout
    assert sample == sh(str(delayline), "--sample", "3", "--delay-ms", "5", "--jitter-ms", "2",
                        "--distribution", "normal", "--seed", "9").stdout  # the seed repeats a run
    assert len(sample.splitlines()) == 3


def test_second_line_on_a_bound_queue_fails_and_says_so(pair: Pair, delayline: Path, tmp_path: Path) -> None:
    start_line(pair, delayline, tmp_path)
    stats = tmp_path / "second.json"
    out = sh(*pair.inside(pair.a, str(delayline), "--queue", str(pair.queue), "--stats", str(stats)), check=False)
    assert out.returncode == 1
    assert f"cannot bind NFQUEUE {pair.queue}" in out.stderr
    second = json.loads(stats.read_text())
    assert second["bound"] is False and second["healthy"] is False


def _netem_tabledist(mu: int, sigma: int, t: int) -> int:
    """netem's tabledist() for one table entry, with C's truncating division."""
    x = (sigma % 8192) * t
    x += 4096 if x >= 0 else -4096
    trunc = abs(x) // 8192 * (1 if x >= 0 else -1)
    return trunc + (sigma // 8192) * t + mu


@pytest.mark.parametrize("dist", ["normal", "pareto", "paretonormal"])
def test_table_delays_are_netems_formula_over_the_table(delayline: Path, tmp_path: Path, dist: str) -> None:
    mu, sigma, n = 40_000_000, 20_000_000, 100_000
    out = sh(str(delayline), "--sample", str(n), "--delay-ms", "40", "--jitter-ms", "20", "--distribution", dist,
             "--seed", "4").stdout
    delays = np.array([int(line.split()[1]) for line in out.splitlines()])
    table_file = next(p for p in (Path("/usr/lib/x86_64-linux-gnu/tc"), Path("/usr/lib/tc"))
                      if (p / f"{dist}.dist").exists()) / f"{dist}.dist"
    table = [int(v) for line in table_file.read_text().splitlines() if line and not line.startswith("#")
             for v in line.split()]
    allowed = {max(0, _netem_tabledist(mu, sigma, t)) for t in table}
    assert set(delays.tolist()) <= allowed  # every delay is the formula applied to a table entry
    expected = np.array([max(0, _netem_tabledist(mu, sigma, t)) for t in table])
    # uniform over the table's entries: the sample mean within 5 standard errors of the table's
    assert abs(delays.mean() - expected.mean()) < 5 * expected.std() / np.sqrt(n)
    print(f"{dist}: mean {delays.mean() / 1e6:.3f} ms (table {expected.mean() / 1e6:.3f}), "
          f"sd {delays.std() / 1e6:.3f} ms (table {expected.std() / 1e6:.3f})")


def test_uniform_is_mu_plus_minus_sigma(delayline: Path) -> None:
    out = sh(str(delayline), "--sample", "100000", "--delay-ms", "10", "--jitter-ms", "4", "--seed", "6").stdout
    delays = np.array([int(line.split()[1]) for line in out.splitlines()]) / 1e6
    assert delays.min() >= 6 and delays.max() < 14
    assert abs(delays.mean() - 10) < 0.05 and abs(delays.std() - 4 / np.sqrt(3)) < 0.05
