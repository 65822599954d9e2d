"""backends/docker_stats.py: the broker process's CPU series follows a replaced process (an --events broker restart:
the entrypoint starts a new child) and stays a running total. Real processes: a shell as the entrypoint, running
two busy children one after the other."""

from __future__ import annotations

import subprocess
import sys
import time

from orchestrator.backends.docker_stats import StatsSampler, main_process

BUSY = f"{sys.executable} -c 'import time\ne = time.time() + 0.5\nwhile time.time() < e: pass'"


def test_the_cpu_series_runs_on_across_a_replaced_process() -> None:
    entry = subprocess.Popen(["bash", "-c", f"{BUSY}; {BUSY}; exec sleep 30"])
    try:
        sampler = StatsSampler("unused")
        deadline = time.monotonic() + 5
        while main_process(entry.pid) == entry.pid and time.monotonic() < deadline:
            time.sleep(0.01)
        sampler.entrypoint, sampler.pid = entry.pid, main_process(entry.pid)
        first = sampler.pid
        readings: list[tuple[int | None, int]] = []
        end = time.monotonic() + 1.6
        while time.monotonic() < end:
            readings.append((sampler._process_cpu_ns(), sampler.process_restarts))
            time.sleep(0.05)
    finally:
        entry.kill()
        entry.wait()
    values = [v for v, _ in readings if v is not None]
    assert sampler.pid != first and sampler.process_restarts >= 1, readings
    assert values == sorted(values), "a running total never goes down"
    before = max(v for v, n in readings if v is not None and n == 0)
    assert values[-1] > before, "the second child's CPU is added to the first's"
