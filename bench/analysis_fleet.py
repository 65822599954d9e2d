"""bench/analysis.py --fleet: (a) in a child process with the peak memory of its process tree, against (b)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from analysis_fleet_record import stop
from analysis_timing import Case, fmt, time_bare_tshark, time_pyshark

from orchestrator.analysis import RunInputs, analyse_run, write_run_outputs
from orchestrator.analysis.keying import DeviceFleet, keying_for
from orchestrator.analysis.logs import fleet_send_logs
from orchestrator.analysis.pcapfile import scan_capture
from orchestrator.backends.process import run
from orchestrator.backends.tshark import export_chunks
from orchestrator.model.layout import Layout
from orchestrator.runanalysis.exchanges import write_exchanges

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
    """In a fresh process: analyse_run and the exchanges (exchanges.csv, as runanalysis/analyse.py does for every cell)
    once, then write the rest of the outputs; print seconds and memory (JSON).

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
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        result = analyse_run(inputs, export_chunks)
        result.metrics["exchanges"] = write_exchanges(result, Layout(Path(out)))  # exchanges.csv, as every cell
        t1 = time.perf_counter()
        self_kb = _status_kb("self", "VmHWM")
        children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
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


def time_analysis_child(case: Case, entry: Path = ENTRY) -> dict[str, Any]:
    """Our analysis (and the writing of its outputs) in a child process running ``entry`` (this bench, or the
    same bench of another checkout: --compare-with), its process tree polled every 50 ms: each process's
    VmHWM (tshark's peak, read before it exits) and the tree's summed VmRSS (what is resident at once)."""
    import json

    proc = subprocess.Popen([sys.executable, str(entry), "--analysis-child", _inputs_json(case.inputs)],
                            stdout=subprocess.PIPE, text=True, cwd=entry.parent.parent)
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
        raise SystemExit(f"the analysis child ({entry}) failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["polled_tree_kb"] = tree_peak
    res["tshark_kb"] = max((kb for name, kb in hwm.values() if name.startswith("tshark")), default=0)
    res["total_s"] = res["analysis_s"] + res["write_s"]
    res["sum_kb"] = res["self_with_write_kb"] + res["tshark_kb"]  # Python's peak includes the writing
    return res


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _gib(kb: float) -> str:
    return f"{kb / 1024**2:.2f}"


def _last_packet_us(pcap: Path) -> int:
    out = run(["capinfos", "-e", "-S", str(pcap)], timeout=600).stdout
    for line in out.splitlines():
        if line.startswith("Last packet time:"):
            return int(round(float(line.split(":", 1)[1]) * 1e6))
    raise SystemExit(f"capinfos printed no last packet time for {pcap}:\n{out}")


def _cut_log(src: Path, dst: Path, column: str, last_us: int) -> None:
    """The lines of a CSV log whose ``column`` (a time in us) is at most ``last_us`` (the header kept)."""
    lines = src.read_text().splitlines(keepends=True)
    at = lines[0].rstrip("\n").split(",").index(column)
    dst.write_text("".join([lines[0], *(ln for ln in lines[1:] if int(ln.split(",")[at]) <= last_us)]))


def cut_capture(case: Case, packets: int) -> Case:
    """The run the first ``packets`` packets of the fleet capture are: the capture cut by editcap, the send and
    receive logs cut at its last packet's time (so the tables grow with the capture, as a shorter run's
    would); cached in a folder next to the capture, with the same key logs and expectations."""
    import dataclasses
    import shutil

    src, inputs = case.inputs.pcap, case.inputs
    folder = src.parent / f"first{packets}"
    out = folder / src.name
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "devices").mkdir(parents=True)
        run(["editcap", "-r", str(src), str(folder / "cut.pcapng"), f"1-{packets}"], timeout=600)
        last_us = _last_packet_us(folder / "cut.pcapng")
        assert inputs.fleet_dir is not None and inputs.subscriber_log is not None
        send_logs = set(fleet_send_logs(inputs.fleet_dir))
        for log in inputs.fleet_dir.iterdir():
            if log in send_logs:
                _cut_log(log, folder / "devices" / log.name, "t_send_us", last_us)
            else:
                shutil.copy(log, folder / "devices" / log.name)
        _cut_log(inputs.subscriber_log, folder / inputs.subscriber_log.name, "t_recv_us", last_us)
        (folder / "cut.pcapng").replace(out)  # last: its presence says the folder is complete
    cut = dataclasses.replace(inputs, pcap=out, subscriber_log=folder / inputs.subscriber_log.name,
                              keying=DeviceFleet(inputs.devices, folder / "devices"))
    return Case(f"{case.name}, first {packets:,} packets", cut)


def _sizes(case: Case, sizes: list[int]) -> list[tuple[int, Case]]:
    total = scan_capture(case.inputs.pcap).packets
    cases = [(n, cut_capture(case, n)) for n in sorted(set(sizes)) if 0 < n < total]
    return [*cases, (total, case)]


def _row(label: str, b: float, runs: list[dict[str, Any]]) -> str:
    a = statistics.median(r["analysis_s"] for r in runs)
    w = statistics.median(r["write_s"] for r in runs)
    total = statistics.median(r["total_s"] for r in runs)
    worst = max(runs, key=lambda r: r["sum_kb"])
    peak = worst["sum_kb"]
    return (f"  {label:<14} {a:8.2f} + {w:6.2f} = {total:7.2f} s  {total / b:5.2f} "
            f"{_verdict(total / b <= RATIO_TARGET):>6}   {_gib(worst['self_with_write_kb']):>5} + "
            f"{_gib(worst['tshark_kb']):>5} = {_gib(peak):>5} GiB {_verdict(peak * 1024 <= MEMORY_TARGET_BYTES):>6}"
            f"   (tree RSS at once {_gib(max(r['polled_tree_kb'] for r in runs))} GiB)")


def bench_fleet(case: Case, repeats: int, pyshark_packets: int, sizes: list[int],
                compare_with: Path | None = None) -> None:
    """(a) = analysis + writing per_message.csv, packets.csv and metrics.json, against (b), at each size; with
    ``compare_with`` the same child of another checkout runs alongside, interleaved (its figures marked)."""
    entries = [("ours", ENTRY)] + ([("compared", compare_with / "bench" / "analysis.py")] if compare_with else [])
    for n, sized in _sizes(case, sizes):
        b_times: list[float] = []
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in entries}
        for _ in range(repeats):  # interleaved so machine load hits all alike
            b_times.append(time_bare_tshark(sized))
            for label, entry in entries:
                runs[label].append(time_analysis_child(sized, entry))
        b = statistics.median(b_times)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\n== {sized.name}: {sized.inputs.pcap.name}, {n:,} packets, {repeats} repeat(s); load average "
              f"{load} on {os.cpu_count()} cores")
        print(f"  (b) bare tshark -T fields: median {b:.2f} s ({n / b:,.0f} packets/s), runs {fmt(b_times)}")
        print(f"  (a) = analysis + writing the outputs; (a)/(b) target <= {RATIO_TARGET}; peak memory = VmHWM of "
              "Python (writing included) + VmHWM of tshark, target <= 2 GiB")
        print(f"  {'':<14} {'analysis':>8} + {'write':>6} = {'(a)':>7}    (a)/(b)          "
              "Python + tshark =  sum")
        for label, _ in entries:
            print(_row(label if label == "ours" else f"{label}*", b, runs[label]))
        warned = runs["ours"][0]["warnings"]
        for w in warned[:3]:
            print(f"      warning: {w}")
        if len(warned) > 3:
            print(f"      ... {len(warned) - 3} more warning(s)")
    if compare_with:
        print(f"\n  * compared: the analysis child of {compare_with} (another checkout), run in the same loop")
    if pyshark_packets > 0:
        total = scan_capture(case.inputs.pcap).packets
        c_slice, n = time_pyshark(case, pyshark_packets)
        rate = n / c_slice
        print(f"(c) pyshark default iteration: first {n:,} packets in {c_slice:.2f} s = {rate:,.0f} packets/s; "
              f"EXTRAPOLATED to {total:,} packets: {total / rate:,.0f} s")
