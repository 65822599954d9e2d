"""Which data segments the broker got, read from its own ACKs in the broker-side capture.

A copy of a segment (the original or any resend) that the capture saw on its way in was delivered when
an ACK from the broker acknowledges its bytes after it arrived and before the next copy of those bytes
did: the cumulative ACK reaching its end, or a SACK block (D-SACK included) holding it, or a reset
that answers it (a copy reaching a socket the broker already closed: RFC 793 sets the reset's sequence
number to the copy's ACK number; seen at the end of a connection whose last segments were held by a
delay line downstream of the capture, as on a board's path). A copy whose
bytes were already acknowledged when it arrived (a spurious resend) was delivered only if a SACK block
after it reports it. Every other copy was lost between the capture and the broker's TCP: that is
where the testbed drops (nft or the delay line's loss at the broker's ingress), so these counts are
the injected loss as the wire shows it, each lost copy counted once even when the sender coalesced
several into one resend, and spurious resends (reordering, an RTO in a delay spike) not counted.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR

RST = 0x04  # the TCP flags' reset bit


class ByteRanges:
    """The union of the byte ranges [start, end) added so far, as sorted disjoint ranges."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def add(self, start: float, end: float) -> bool:
        """Add a range; True when some of its bytes were already in the union."""
        i = bisect.bisect_right(self.ends, start)  # the first range ending after ``start``
        j = bisect.bisect_left(self.starts, end)  # ranges from i to j-1 overlap or touch
        overlap = i < j and self.starts[i] < end and start < self.ends[j - 1]
        if i < j:
            start, end = min(start, self.starts[i]), max(end, self.ends[j - 1])
        self.starts[i:j], self.ends[i:j] = [start], [end]
        return bool(overlap)


def _blocks(le: object, re_: object) -> list[tuple[float, float]]:
    if not isinstance(le, str) or not le:
        return []
    lefts, rights = le.split(AGGREGATOR), str(re_).split(AGGREGATOR)
    return [(float(a), float(b)) for a, b in zip(lefts, rights, strict=False) if a and b]


def _next_copy_frame(frames: np.ndarray, seq: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each copy (frame order), the frame of the next copy holding its first byte (inf if none)."""
    nxt = np.full(len(frames), np.inf)
    prior_end = np.maximum.accumulate(np.concatenate(([-np.inf], end[:-1])))
    for j in np.flatnonzero(seq < prior_end):  # resends: they hold bytes an earlier copy carried
        hit = (frames < frames[j]) & (seq >= seq[j]) & (seq < end[j]) & (nxt > frames[j])
        nxt[hit] = frames[j]
    return nxt


def _delivered(data: pd.DataFrame, acks: pd.DataFrame) -> np.ndarray:
    frames = data["frame"].to_numpy(dtype=float)
    seq = data["tcp_seq"].to_numpy(dtype=float)
    end = seq + data["tcp_len"].to_numpy(dtype=float)
    nxt = _next_copy_frame(frames, seq, end)
    ack_frame = acks["frame"].to_numpy(dtype=float)
    cum = np.maximum.accumulate(acks["tcp_ack"].fillna(0).to_numpy(dtype=float)) if len(acks) else np.array([])
    sacks = [_blocks(le, re_) for le, re_ in zip(acks["sack_le"], acks["sack_re"], strict=True)]
    reset = ((acks["tcp_flags"].fillna(0).astype(int) & RST) != 0).to_numpy() if "tcp_flags" in acks else \
        np.zeros(len(acks), dtype=bool)
    reset_seq = acks["tcp_seq"].to_numpy(dtype=float) if "tcp_seq" in acks else np.zeros(len(acks))
    copy_ack = data["tcp_ack"].to_numpy(dtype=float) if "tcp_ack" in data else np.full(len(data), np.nan)
    answer = (reset, reset_seq, copy_ack)
    out = np.zeros(len(data), dtype=bool)
    for i in range(len(data)):
        lo = np.searchsorted(ack_frame, frames[i], side="right")  # first ACK after the copy
        hi = np.searchsorted(ack_frame, nxt[i], side="left")  # up to the next copy
        if lo >= hi:
            continue
        before = cum[lo - 1] if lo > 0 else -np.inf
        if before < end[i] <= cum[hi - 1] or _answered_by_reset(i, lo, hi, frames, ack_frame, answer):
            out[i] = True
            continue
        out[i] = any(a <= seq[i] and end[i] <= b for k in range(lo, hi) for a, b in sacks[k])
    return out


def _answered_by_reset(i: int, lo: int, hi: int, frames: np.ndarray, ack_frame: np.ndarray,
                       answer: tuple[np.ndarray, np.ndarray, np.ndarray]) -> bool:
    """A reset from the broker answers copy i: its sequence number is the copy's ACK number (RFC 793) and
    it comes before the client's next data segment (every segment carries that ACK number while the
    broker sends nothing, so a reset after a later segment may answer that one instead)."""
    reset, reset_seq, copy_ack = answer
    next_data = frames[i + 1] if i + 1 < len(frames) else np.inf
    window = slice(lo, hi)
    return bool((reset[window] & (reset_seq[window] == copy_ack[i]) & (ack_frame[window] < next_data)).any())


def runs_of(flags: np.ndarray) -> np.ndarray:
    """Lengths of the runs of consecutive True values."""
    padded = np.concatenate(([False], flags.astype(bool), [False])).astype(int)
    edges = np.diff(padded)
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def broker_losses(packets: pd.DataFrame, streams: set[int], broker_port: int) -> dict[str, Any]:
    """Copies of data segments towards the broker that it did not get, counted from the capture alone,
    and the runs of consecutive lost copies (the burstiness a Gilbert loss model sets)."""
    lost_all: list[np.ndarray] = []
    copies = 0
    for stream in sorted(streams):
        pk = packets[packets["stream"] == stream].sort_values("frame")
        data = pk[(pk["dst_port"] == broker_port) & (pk["tcp_len"] > 0) & pk["tcp_seq"].notna()]
        acks = pk[(pk["src_port"] == broker_port) & pk["tcp_ack"].notna()]
        if data.empty:
            continue
        lost_all.append(~_delivered(data, acks))
        copies += len(data)
    lost = np.concatenate(lost_all) if lost_all else np.zeros(0, dtype=bool)
    runs = np.concatenate([runs_of(x) for x in lost_all]) if lost_all else np.zeros(0, dtype=int)
    return {
        "tcp_copies_to_broker": copies,
        "tcp_copies_lost_to_broker": int(lost.sum()),
        "tcp_copy_loss_pct": float(lost.mean() * 100) if copies else None,
        "tcp_loss_runs_to_broker": int(len(runs)),
        "tcp_loss_run_mean": float(runs.mean()) if len(runs) else None,
        "tcp_loss_run_max": int(runs.max()) if len(runs) else None,
    }
