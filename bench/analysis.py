"""Benchmark of orchestrator/analysis on a large key-logged TLS capture.

Times (a) our analysis end to end (analyse_run: record walk, ONE tshark pass, tables, metrics),
(b) a bare ``tshark -T fields`` export of the same fields with the same options (decryption
included), (c) pyshark's default per-packet iteration over a slice of the same file, extrapolated
to the whole file (said so in the output). Prints packets/s and the ratios (a)/(b) (goal <= 1.3)
and (c)/(a) (goal >= 50).

Captures:
- the reference capture bench_plain_and_t12chacha.pcap (98,504 packets, both legs, plain + TLS 1.2
  ChaCha20) from $TESTBED_REFERENCE_CAPTURES (default ../shared/reference-captures);
- with ``--record``: a fresh >= 100,000-packet TLS capture made here on loopback only (Mosquitto on
  127.0.0.1, dumpcap on lo, paho publisher + subscriber with key logs, TLS 1.2
  ECDHE-ECDSA-CHACHA20-POLY1305 on a non-standard port). One real session, not copies glued together.

    .venv/bin/python bench/analysis.py [--record] [--repeats 3] [--pyshark-packets 1500]

With ``--fleet`` (instead of the captures above): a ~1.5M-packet FLEET capture, 1000 virtual ESP32s
(the firmware core's host ``fleet``, built in /tmp/fwb-bench when missing) x 425 messages over TLS 1.2
ECDHE-ECDSA-CHACHA20-POLY1305 to a Mosquitto on 127.0.0.1 (a free port), a paho subscriber, dumpcap on lo;
cached in ~/.cache/testbed-bench/fleet/ (``--re-record`` to record again; recording takes minutes).
There (a) is the analysis AND the writing of what a user gets (exchanges.csv, per_message.csv, packets.csv,
metrics.json), run in a child process; printed: (a), (b), (a)/(b) against the target 1.2 and (a)'s PEAK
MEMORY, the VmHWM of the Python process (writing included) + the VmHWM of tshark, against 2 GiB; at each of
--fleet-sizes packets (the first N of the capture, cut by editcap and cached next to it) and the whole, so
the growth shows.
--compare-with DIR runs the same child of another checkout in the same loop (before vs after, one run).

    .venv/bin/python bench/analysis.py --fleet --repeats 1 --pyshark-packets 0 [--re-record]
        [--fleet-sizes 250000,500000] [--compare-with /tmp/old-checkout]

(c) needs pyshark, a bench-only extra: `pip install -e '.[bench]'` (or skip (c) with --pyshark-packets 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis_fleet import analysis_child, bench_fleet  # noqa: E402
from analysis_fleet_record import FLEET_BUILD, FLEET_CACHE, fleet_case  # noqa: E402
from analysis_record import record, recorded_inputs  # noqa: E402
from analysis_timing import PYSHARK_MISSING, Case, bench, reference_dir  # noqa: E402

from orchestrator.analysis import RunInputs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pyshark-packets", type=int, default=1500, help="slice for (c); 0 skips it")
    ap.add_argument("--record", action="store_true",
                    help="also record and time a fresh >=100k-packet capture")
    ap.add_argument("--record-dir", type=Path, default=REPO / ".cache" / "bench-analysis")
    ap.add_argument("--record-messages", type=int, default=30000)
    ap.add_argument("--record-rate", type=float, default=1500.0, help="messages per second")
    ap.add_argument("--reuse", action="store_true", help="reuse an earlier --record capture if present")
    fl = ap.add_argument_group("--fleet: a ~1.5M-packet capture of N virtual ESP32s (the host `fleet`)")
    fl.add_argument("--fleet", action="store_true",
                    help="time (a), (b) and the peak memory of (a) on the fleet capture only (recorded when "
                         "not cached)")
    fl.add_argument("--re-record", action="store_true", help="record the fleet capture even when cached")
    fl.add_argument("--fleet-dir", type=Path, default=FLEET_CACHE, help="its cache (default %(default)s)")
    fl.add_argument("--fleet-build", type=Path, default=FLEET_BUILD,
                    help="host build folder holding `fleet` (built there when missing; default %(default)s)")
    fl.add_argument("--fleet-devices", type=int, default=1000)
    fl.add_argument("--fleet-samples", type=int, default=425,
                    help="messages per device (~3.6 packets each, both legs with ACKs: 425 -> 1,547,233 packets here)")
    fl.add_argument("--fleet-interval-ms", type=float, default=200)
    fl.add_argument("--fleet-connect-rate", type=float, default=40,
                    help="devices started per second (mbedTLS handshakes cost ~30 ms CPU: 200/s timed out on 2 cores)")
    fl.add_argument("--fleet-payload", type=int, default=65)
    fl.add_argument("--fleet-sizes", default="250000,500000",
                    help="also time the first N packets of the capture, for each N (comma-separated; the whole "
                         "capture is always timed)")
    fl.add_argument("--compare-with", type=Path,
                    help="another checkout (e.g. `git worktree add /tmp/old main~3`) whose analysis child runs "
                         "alongside ours, interleaved")
    ap.add_argument("--analysis-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analysis_child:
        return analysis_child(args.analysis_child)
    if args.pyshark_packets > 0 and importlib.util.find_spec("pyshark") is None:
        raise SystemExit(PYSHARK_MISSING)  # say so before minutes of (a) and (b), not after
    if args.fleet:
        signal.signal(signal.SIGTERM, lambda s, _f: sys.exit(128 + s))  # cleanup runs on SIGTERM too
        sizes = [int(x) for x in args.fleet_sizes.split(",") if x.strip()]
        bench_fleet(fleet_case(args), args.repeats, args.pyshark_packets, sizes, args.compare_with)
        return 0
    ref = reference_dir()
    cases = [Case("reference capture (plain + TLS 1.2 ChaCha20, analysed on port 8883)",
                  RunInputs(pcap=ref / "bench_plain_and_t12chacha.pcap", broker_port=8883, tls=True,
                            samples_expected=6250, payload_bytes=100,
                            keylogs=[ref / "bench_plain_and_t12chacha.keys.log"],
                            expected_tls=("TLS 1.2", 0xCCA8)))]
    if args.record:
        folder = args.record_dir
        pcap = folder / "tls_capture.pcapng"
        if args.reuse and pcap.exists():
            cases.append(Case("fresh TLS 1.2 ChaCha20 capture (recorded here earlier)",
                              recorded_inputs(folder, args.record_messages, 65)))
        else:
            cases.append(record(folder, args.record_messages, args.record_rate, 65))
    for case in cases:
        bench(case, args.repeats, args.pyshark_packets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
