"""bench/analysis.py --fleet: (a) in a child process with the peak memory of its process tree, against (b)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from analysis_fleet_record import stop
from analysis_timing import Case, print_times, time_bare_tshark, time_pyshark

from orchestrator.analysis import RunInputs, analyse_run, write_run_outputs
from orchestrator.analysis.keying import keying_for
from orchestrator.analysis.pcapfile import scan_capture
from orchestrator.backends.tshark import export_chunks

ENTRY = Path(__file__).with_name("analysis.py")  # the command line the child runs: --analysis-child
RATIO_TARGET = 1.2
MEMORY_TARGET_BYTES = 2 * 1024**3


def _inputs_json(inp: RunInputs) -> str:
    import json

    return json.dumps({"pcap": str(inp.pcap), "broker_port": inp.broker_port, "tls": inp.tls,
                       "samples_expected": inp.samples_expected, "payload_bytes": inp.payload_bytes,
                       "keylogs": [str(p) for p in inp.keylogs],
                       "publisher_log": str(inp.publisher_log) if inp.publisher_log else None,
                       "subscriber_log": str(inp.subscriber_log) if inp.subscriber_log else None,
                       "expected_tls": list(inp.expected_tls) if inp.expected_tls else None,
                       "devices": inp.devices, "fleet_dir": str(inp.fleet_dir) if inp.fleet_dir else None})


def _status_kb(pid: int | str, key: str) -> int:
    """A /proc/<pid>/status figure in KiB (VmRSS: resident now; VmHWM: its peak since the last exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def analysis_child(raw: str) -> int:
    """In a fresh process: analyse_run once, then write its outputs; print seconds and memory (JSON).

    Python's peak is its VmHWM (ru_maxrss is no good here: Linux carries the parent's high-water mark
    over fork + exec, so it starts at the bench process's size); tshark's is polled by the parent.
    """
    import json
    import resource

    d = json.loads(raw)
    inputs = RunInputs(pcap=Path(d["pcap"]), broker_port=d["broker_port"], tls=d["tls"],
                       samples_expected=d["samples_expected"], payload_bytes=d["payload_bytes"],
                       keylogs=[Path(p) for p in d["keylogs"]],
                       publisher_log=Path(d["publisher_log"]) if d["publisher_log"] else None,
                       subscriber_log=Path(d["subscriber_log"]) if d["subscriber_log"] else None,
                       expected_tls=tuple(d["expected_tls"]) if d["expected_tls"] else None,
                       keying=keying_for(d["devices"], Path(d["fleet_dir"]) if d["fleet_dir"] else None))
    start_kb = _status_kb("self", "VmHWM")
    t0 = time.perf_counter()
    result = analyse_run(inputs, export_chunks)
    t1 = time.perf_counter()
    self_kb = _status_kb("self", "VmHWM")
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    with tempfile.TemporaryDirectory() as out:
        write_run_outputs(result, Path(out))
    t2 = time.perf_counter()
    print(json.dumps({"analysis_s": t1 - t0, "write_s": t2 - t1, "start_self_kb": start_kb, "self_kb": self_kb,
                      "rusage_children_kb": children_kb, "self_with_write_kb": _status_kb("self", "VmHWM"),
                      "packets": len(result.per_packet), "warnings": [w[:160] for w in result.warnings]}))
    return 0


def _tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return pids


def time_analysis_child(case: Case) -> dict[str, Any]:
    """Our analysis in a child process, its process tree polled every 50 ms: each process's VmHWM
    (tshark's peak, read before it exits) and the tree's summed VmRSS (what is resident at once)."""
    import json

    proc = subprocess.Popen([sys.executable, str(ENTRY), "--analysis-child", _inputs_json(case.inputs)],
                            stdout=subprocess.PIPE, text=True)
    hwm: dict[int, tuple[str, int]] = {}
    tree_peak = 0
    try:
        while proc.poll() is None:
            now = 0
            for pid in _tree(proc.pid):
                try:
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                    now += _status_kb(pid, "VmRSS")
                    hwm[pid] = (name, max(hwm.get(pid, ("", 0))[1], _status_kb(pid, "VmHWM")))
                except OSError:
                    pass
            tree_peak = max(tree_peak, now)
            time.sleep(0.05)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        stop(proc)  # type: ignore[arg-type]
    if proc.returncode != 0:
        raise SystemExit(f"the analysis child failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["polled_tree_kb"] = tree_peak
    res["tshark_kb"] = max((kb for name, kb in hwm.values() if name.startswith("tshark")), default=0)
    return res


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _gib(kb: float) -> str:
    return f"{kb / 1024**2:.2f} GiB"


def bench_fleet(case: Case, repeats: int, pyshark_packets: int) -> None:
    total = scan_capture(case.inputs.pcap).packets
    a_runs: list[dict[str, Any]] = []
    b_times: list[float] = []
    for _ in range(repeats):  # interleaved so machine load hits both alike
        b_times.append(time_bare_tshark(case))
        a_runs.append(time_analysis_child(case))
    a_times = [r["analysis_s"] for r in a_runs]
    a, b = print_times(case, total, repeats, a_times, b_times)
    ratio = a / b
    print(f"    (a)/(b) = {ratio:.2f} on medians, {min(a_times) / min(b_times):.2f} on best runs   "
          f"target <= {RATIO_TARGET}: {_verdict(ratio <= RATIO_TARGET)}")
    worst = max(a_runs, key=lambda r: r["self_kb"] + r["tshark_kb"])
    peak = worst["self_kb"] + worst["tshark_kb"]
    print(f"    peak memory of (a): Python max RSS {_gib(worst['self_kb'])} (of which {_gib(worst['start_self_kb'])} "
          f"before analyse_run) + tshark max RSS {_gib(worst['tshark_kb'])} = {_gib(peak)}   "
          f"target <= 2 GiB: {_verdict(peak * 1024 <= MEMORY_TARGET_BYTES)}")
    print(f"      (VmHWM of each; resident at once, the tree's RSS polled every 50 ms: peak "
          f"{_gib(max(r['polled_tree_kb'] for r in a_runs))}; getrusage RUSAGE_CHILDREN ru_maxrss "
          f"(its largest child) {_gib(worst['rusage_children_kb'])}; "
          f"Python incl. writing the outputs: {_gib(max(r['self_with_write_kb'] for r in a_runs))})")
    print("    writing per_message.csv + packets.csv + metrics.json (not in (a)): "
          f"{statistics.median(r['write_s'] for r in a_runs):.2f} s; analysis warnings: {len(a_runs[0]['warnings'])}")
    for w in a_runs[0]["warnings"]:
        print(f"      - {w}")
    if pyshark_packets > 0:
        c_slice, n = time_pyshark(case, pyshark_packets)
        rate = n / c_slice
        print(f"(c) pyshark default iteration: first {n:,} packets in {c_slice:.2f} s = {rate:,.0f} packets/s; "
              f"EXTRAPOLATED to {total:,} packets: {total / rate:,.0f} s = {total / rate / a:.0f} x (a)")
