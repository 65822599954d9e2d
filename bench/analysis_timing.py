"""bench/analysis.py's timings: (a) our analysis end to end, (b) a bare ``tshark -T fields`` export of the
same fields, (c) pyshark's default per-packet iteration over a slice; and the lines they print."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.analysis import RunInputs, analyse_run, write_run_outputs
from orchestrator.analysis.pcapfile import scan_capture
from orchestrator.backends.process import run
from orchestrator.backends.tshark import export_chunks, fields_argv, merged_keylog

REPO = Path(__file__).resolve().parent.parent
PYSHARK_MISSING = ("pyshark is not installed; it is only needed for (c), as the `bench` extra: "
                   "pip install -e '.[bench]'   (or skip (c) with --pyshark-packets 0)")



@dataclass(frozen=True)
class Case:
    name: str
    inputs: RunInputs


def reference_dir() -> Path:
    raw = os.environ.get("TESTBED_REFERENCE_CAPTURES")
    return Path(raw) if raw else REPO.parent / "shared" / "reference-captures"


def time_analysis(case: Case) -> tuple[float, float]:
    """(analysis seconds, seconds to write per_message.csv + packets.csv + metrics.json)."""
    t0 = time.perf_counter()
    result = analyse_run(case.inputs, export_chunks)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        write_run_outputs(result, Path(out))
    return t1 - t0, time.perf_counter() - t1


def time_bare_tshark(case: Case) -> float:
    request = case.inputs.export_request()
    with merged_keylog(request.keylogs) as keylog:
        argv = fields_argv(request, keylog)
        t0 = time.perf_counter()
        run(argv, timeout=1800)
        return time.perf_counter() - t0


def time_pyshark(case: Case, packets: int) -> tuple[float, int]:
    """Default FileCapture iteration (PDML/XML) over the first ``packets`` packets."""
    try:
        import pyshark
    except ImportError:
        raise SystemExit(PYSHARK_MISSING) from None

    inp = case.inputs
    with merged_keylog(list(inp.keylogs)) as keylog:
        prefs = {"tls.keylog_file": str(keylog)} if keylog else {}
        decode_as = None
        if inp.tls and inp.broker_port != 8883:  # the same decode-as rules as our pass
            decode_as = {f"tcp.port=={inp.broker_port}": "tls", f"tls.port=={inp.broker_port}": "mqtt"}
        cap = pyshark.FileCapture(str(inp.pcap), override_prefs=prefs, decode_as=decode_as)
        n = 0
        t0 = time.perf_counter()
        try:
            for pkt in cap:
                _ = [layer.layer_name for layer in pkt.layers]  # touch every packet's layers
                n += 1
                if n >= packets:
                    break
        finally:
            cap.close()
        return time.perf_counter() - t0, n


def print_times(case: Case, total: int, repeats: int, a_times: list[float],
                b_times: list[float]) -> tuple[float, float]:
    """The (a) and (b) lines; their medians."""
    a, b = statistics.median(a_times), statistics.median(b_times)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n== {case.name}: {case.inputs.pcap.name}, {total:,} packets, {repeats} repeats; "
          f"load average {load} on {os.cpu_count()} cores")
    print(f"(a) our analysis end to end : median {a:6.2f} s {total / a:9,.0f} packets/s  runs {fmt(a_times)}")
    print(f"(b) bare tshark -T fields   : median {b:6.2f} s {total / b:9,.0f} packets/s  runs {fmt(b_times)}")
    return a, b


def bench(case: Case, repeats: int, pyshark_packets: int) -> dict[str, float]:
    total = scan_capture(case.inputs.pcap).packets
    a_times, b_times, w_times = [], [], []
    for _ in range(repeats):  # interleaved so machine load hits both alike
        b_times.append(time_bare_tshark(case))
        a, w = time_analysis(case)
        a_times.append(a)
        w_times.append(w)
    a, b = print_times(case, total, repeats, a_times, b_times)
    print(f"    (a)/(b) = {a / b:.2f} on medians, {min(a_times) / min(b_times):.2f} on best runs "
          "(goal <= 1.3)")
    print("    writing per_message.csv + packets.csv + metrics.json (not in (a)): "
          f"{statistics.median(w_times):.2f} s")
    out = {"packets": total, "a_s": a, "b_s": b, "a_over_b": a / b}
    if pyshark_packets > 0:
        c_slice, n = time_pyshark(case, pyshark_packets)
        rate = n / c_slice
        c_full = total / rate
        print(f"(c) pyshark default iteration: first {n:,} packets in {c_slice:.2f} s (start-up included) = "
              f"{rate:,.0f} packets/s; EXTRAPOLATED to {total:,} packets: {c_full:,.0f} s")
        print(f"    (c)/(a) = {c_full / a:.0f}   (goal >= 50; (c) extrapolated from a slice)")
        out.update({"c_s_extrapolated": c_full, "c_over_a": c_full / a, "pyshark_pps": rate})
    return out


def fmt(xs: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)
