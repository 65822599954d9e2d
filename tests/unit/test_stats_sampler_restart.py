"""backends/docker_stats.py: the broker process's CPU series follows a replaced process (an --events broker restart:
the entrypoint starts a new child) and stays a running total. Real processes: a shell as the entrypoint, running
two busy children one after the other; and a busy process below the entrypoint's child, counted with it."""

from __future__ import annotations

import subprocess
import sys
import time

from orchestrator.backends.docker_stats import StatsSampler, main_process, process_cpu_ns

BUSY = f"{sys.executable} -c 'import time\ne = time.time() + 0.5\nwhile time.time() < e: pass'"


def _sampler_on(entry: subprocess.Popen) -> StatsSampler:
    """A sampler on ``entry`` (a container's entrypoint stand-in), once its first child has started."""
    sampler = StatsSampler("unused")
    deadline = time.monotonic() + 5
    while main_process(entry.pid) == entry.pid and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.entrypoint, sampler.pid = entry.pid, main_process(entry.pid)
    return sampler


def test_the_cpu_series_runs_on_across_a_replaced_process() -> None:
    entry = subprocess.Popen(["bash", "-c", f"{BUSY}; {BUSY}; exec sleep 30"])
    try:
        sampler = _sampler_on(entry)
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


def test_the_cpu_is_the_whole_process_trees() -> None:
    """A broker whose work runs below the entrypoint's child (a RabbitMQ node: its start script, then the Erlang VM
    below it): the VM's CPU is counted, which the child's own (an idle shell's) is not."""
    entry = subprocess.Popen(["bash", "-c", f"sh -c \"{BUSY}; sleep 2\"; exec sleep 30"])
    try:
        sampler = _sampler_on(entry)
        script = sampler.pid
        readings = []
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            readings.append(sampler._process_cpu_ns())
            time.sleep(0.05)
        own = process_cpu_ns(script)  # the script's own, all the old figure was
    finally:
        entry.kill()
        entry.wait()
    values = [v for v in readings if v is not None]
    assert sampler.pid == script and sampler.process_restarts == 0
    # the busy grandchild's (up to 0.5 s; a loaded machine gives it less), not the idle script's few milliseconds
    assert own is not None and own < 0.05e9 and values == sorted(values) and values[-1] > 0.1e9 + own, (own, values)
