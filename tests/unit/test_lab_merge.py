"""The loader summaries of a fleet dealt over lab hosts, merged into one (orchestrator/lab/merge.py)."""

from __future__ import annotations

from orchestrator.analysis import device_phases
from orchestrator.lab.merge import merge_summaries


def _summary(cpu: str, messages: int) -> dict:
    return {"devices": 10, "simulated": True, "messages": messages, "cpu_user_s": 1.0, "cpu_sys_s": 0.5,
            "cpu_model": cpu, "max_rss_kb": 1000, "wall_s": 20.0}


def test_the_devices_clock_is_one_cpu_where_every_host_has_it_and_each_hosts_where_they_differ() -> None:
    same = merge_summaries({"pub": _summary("AMD EPYC 7B13", 100), "pub2": _summary("AMD EPYC 7B13", 100)})
    assert device_phases.clock_label(same) == "host CPU AMD EPYC 7B13 (virtual device)"
    mixed = merge_summaries({"pub2": _summary("Intel Xeon E5", 100), "pub": _summary("AMD EPYC 7B13", 100)})
    # the first host's CPU alone would label the other host's devices' times with a CPU they did not run on
    assert device_phases.clock_label(mixed) == "host CPU pub: AMD EPYC 7B13; pub2: Intel Xeon E5 (virtual device)"
    assert mixed["hosts"]["pub2"]["cpu_model"] == "Intel Xeon E5" and mixed["messages"] == 200
