"""A run folder's analysis; for a run across lab hosts (docs/multi-host.md) with what crossing hosts adds.

The analysis is the single-host one (runanalysis/analyse.py analyse_run_folder), for every run. A run across hosts
(its spec names an inventory) adds two things (add_lab_metrics, before metrics.json is written):

* the publisher HOST's clock against the broker host's (logs/host_clock.json, orchestrator/lab/collect.py; with
  several publisher hosts the widest bound's, each host's own in metrics.json ``fleet.hosts`` with its start:
  analysis/fleetstart.py),
  given the board's treatment (runanalysis/analyse.py with_delay_verdict, analysis/clock.py's rule): metrics.json
  ``clock`` holds the estimate and whether its bound allows one-way delay; when it does not, or when there is
  no estimate, delay_ms and uplink_ms are withdrawn with the reason;
* the losses BEFORE the capture: a lab router drops the publisher's packets upstream of the broker-side
  capture, which never sees a dropped copy (analysis/segments.py counts copies lost between the capture and the
  broker, where a single host drops). What it sees is a hole in the stream's sequence space, filled later by a
  resend: ``loss.tcp_holes_before_capture`` counts the holes (each took at least one drop: a lower bound on the
  packets dropped) and ``loss.tcp_segments_lost_before_capture`` the holes' bytes in segments of the stream's
  median size (the publisher sends one reading per segment; a resend may carry several lost ones). The second is
  an estimate of the readings' segments lost: a busy publisher coalesces readings while a loss is repaired, and a
  dropped segment carrying three readings counts three.

Used after a run and by `testbed report`.
"""

from __future__ import annotations

import io
from typing import Any

import pandas as pd

from orchestrator.analysis import metrics as run_metrics
from orchestrator.analysis.fleetstart import add_fleet_hosts, first_due
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import read_json
from orchestrator.runanalysis.analyse import with_delay_verdict

FIRST_DATA_BYTE = 1.0  # relative sequence numbers: the SYN takes 0


def with_host_clock(metrics: dict[str, Any], host_clock: dict[str, Any]) -> dict[str, Any]:
    """metrics.json's ``clock`` for a publisher host; ``metrics``' delay figures withdrawn when the clocks do not
    allow them."""
    block = with_delay_verdict(metrics, host_clock)
    if not host_clock.get("available"):
        reason = (f"the publisher host's clock against the broker host's is unknown ({host_clock.get('reason')}): "
                  "one-way delay is not available")
        block["one_way_delay"] = {"available": False, "reason": reason}
        for key in ("delay_ms", "uplink_ms"):
            metrics[key] = run_metrics.unavailable_stats(reason)
    return block


def losses_before_capture(packets: pd.DataFrame) -> dict[str, Any]:
    """Data towards the broker that never reached the capture: holes in each publisher stream's sequence space."""
    need = {"leg", "stream", "frame", "tcp_seq", "tcp_len"}
    if not need <= set(packets.columns):
        return {"tcp_segments_lost_before_capture": None, "tcp_holes_before_capture": None,
                "tcp_bytes_lost_before_capture": None}
    up = packets[(packets["leg"] == "publisher->broker") & (packets["tcp_len"] > 0) & packets["tcp_seq"].notna()]
    lost = holes = missing = 0
    for _stream, seg in up.sort_values("frame").groupby("stream"):
        size = float(seg["tcp_len"].median())
        top = FIRST_DATA_BYTE
        for start, length in zip(seg["tcp_seq"].astype(float), seg["tcp_len"].astype(float), strict=True):
            if start > top:  # bytes [top, start) went by before the capture saw them
                holes += 1
                missing += int(start - top)
                lost += max(1, round((start - top) / size))
            top = max(top, start + length)
    return {"tcp_segments_lost_before_capture": lost, "tcp_holes_before_capture": holes,
            "tcp_bytes_lost_before_capture": missing}


def add_lab_metrics(metrics: dict[str, Any], packets: pd.DataFrame, lay: Layout) -> None:
    """What a run across hosts adds to ``metrics`` before metrics.json is written: the publisher host's clock
    (delay figures withdrawn when the clocks do not allow them) and the losses before the capture."""
    host_clock = read_json(lay.host_clock) or {"available": False, "reason": "no clock record came back"}
    metrics["clock"] = with_host_clock(metrics, host_clock)
    start = read_json(lay.fleet_start)  # a fleet over several publisher hosts
    due = {h: first_due(lay.host_logs(h) / "fleet") for h in (start or {}).get("hosts", {})}
    add_fleet_hosts(metrics, packets, host_clock, start, due)
    # the table as packets.csv holds it (the columns' types as a reader of that file sees them)
    as_written = pd.read_csv(io.StringIO(packets.to_csv(index=False)))
    metrics.setdefault("loss", {}).update(losses_before_capture(as_written))
