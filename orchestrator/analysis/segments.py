"""Which data segments the broker got, read from its own ACKs in the broker-side capture.

A copy of a segment (the original or any resend) that the capture saw on its way in was delivered when
an ACK from the broker acknowledges its bytes after it arrived and before the next copy of those bytes
did: the cumulative ACK reaching its end, or a SACK block (D-SACK included) holding it, or a reset
that answers it (a copy reaching a socket the broker already closed: RFC 793 sets the reset's sequence
number to the copy's ACK number; seen at the end of a connection whose last segments were held by a
delay line downstream of the capture, as on a board's path). A copy whose
bytes were already acknowledged when it arrived (a spurious resend) was delivered only if a SACK block
after it reports it. A copy resent before any ACK could answer it (a tail loss probe or an RTO firing
while the broker delays its ACK) was delivered when an ACK after the resend reports its bytes as
received twice (a D-SACK, RFC 2883): the broker got both copies. Every other copy was lost between
the capture and the broker's TCP: that is
where the testbed drops (nft or the delay line's loss at the broker's ingress), so these counts are
the injected loss as the wire shows it, each lost copy counted once even when the sender coalesced
several into one resend, and spurious resends (reordering, an RTO in a delay spike) not counted.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, Self

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


def _column(packets: pd.DataFrame, name: str, rows: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """One column at ``rows`` as floats (``fill`` where the table has no such column); only those rows are
    converted (a fleet's capture has 1.7 million)."""
    if name not in packets:
        return np.full(len(rows), fill)
    return packets[name].array[rows].to_numpy(dtype=float, na_value=np.nan)


def _in_stream_order(packets: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """The rows where ``mask`` holds, sorted by (stream, frame)."""
    rows = np.flatnonzero(mask)
    return rows[np.lexsort((packets["frame"].to_numpy()[rows], packets["stream"].to_numpy()[rows]))]


@dataclass(frozen=True)
class _Part:
    """Arrays of rows sorted by stream: :meth:`part` gives one stream's own."""

    stream: np.ndarray

    def part(self, stream: float) -> Self:
        lo, hi = np.searchsorted(self.stream, stream, "left"), np.searchsorted(self.stream, stream, "right")
        return replace(self, **{f.name: getattr(self, f.name)[lo:hi] for f in fields(self)})


@dataclass(frozen=True)
class _Copies(_Part):
    """Data segments towards the broker (stream, then frame order)."""

    frame: np.ndarray
    seq: np.ndarray
    end: np.ndarray
    ack: np.ndarray  # each copy's own ACK number

    @classmethod
    def of(cls, packets: pd.DataFrame, rows: np.ndarray) -> _Copies:
        seq = _column(packets, "tcp_seq", rows)
        return cls(_column(packets, "stream", rows), _column(packets, "frame", rows), seq,
                   seq + _column(packets, "tcp_len", rows), _column(packets, "tcp_ack", rows, np.nan))


@dataclass(frozen=True)
class _Acks(_Part):
    """The broker's ACKs (stream, then frame order)."""

    frame: np.ndarray
    ack: np.ndarray
    reset: np.ndarray  # the reset flag
    seq: np.ndarray
    le: np.ndarray  # SACK blocks' left and right edges, as exported (AGGREGATOR-joined text)
    re: np.ndarray

    @classmethod
    def of(cls, packets: pd.DataFrame, rows: np.ndarray) -> _Acks:
        flags = np.nan_to_num(_column(packets, "tcp_flags", rows), nan=0.0).astype(np.int64)
        return cls(_column(packets, "stream", rows), _column(packets, "frame", rows),
                   _column(packets, "tcp_ack", rows), (flags & RST) != 0, _column(packets, "tcp_seq", rows),
                   packets["sack_le"].iloc[rows].to_numpy(dtype=object),
                   packets["sack_re"].iloc[rows].to_numpy(dtype=object))

    def cumulative(self) -> np.ndarray:
        return np.maximum.accumulate(self.ack) if len(self.ack) else np.zeros(0)


def _delivered(data: _Copies, acks: _Acks) -> np.ndarray:
    """Which copies (``data``: one stream's, frame order) the broker got, judged from its ``acks``.

    The cumulative ACK decides most copies at once; the few it leaves open (a spurious resend, a
    copy acknowledged only by a SACK block, answered by a reset or reported twice) are looked at one by one.
    """
    frames, seq, end = data.frame, data.seq, data.end
    nxt = _next_copy_frame(frames, seq, end)
    lo = np.searchsorted(acks.frame, frames, side="right")  # first ACK after the copy
    hi = np.searchsorted(acks.frame, nxt, side="left")  # up to the next copy
    out = lo < hi
    covered = out.copy()
    if out.any():
        cum = acks.cumulative()
        before = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], -np.inf)
        covered &= (before < end) & (end <= cum[np.maximum(hi - 1, 0)])
    answer = (acks.reset, acks.seq, data.ack)
    sacks = _SackBlocks(acks)
    for i in np.flatnonzero(out & ~covered).tolist():
        if not _answered_by_reset(i, lo[i], hi[i], frames, acks.frame, answer):
            out[i] = any(x <= seq[i] and end[i] <= y for k in range(lo[i], hi[i]) for x, y in sacks[k])
    for i in np.flatnonzero(~out & np.isfinite(nxt)).tolist():
        j = int(np.searchsorted(frames, nxt[i]))  # the next copy of copy i's first byte
        out[i] = any(sacks.duplicate(k, seq[i], end[i]) for k in range(lo[j], hi[j]))
    return out


class _SackBlocks:
    """The SACK blocks of each ACK, parsed when first asked for."""

    def __init__(self, acks: _Acks) -> None:
        self.acks = acks
        self.parsed: dict[int, list[tuple[float, float]]] = {}

    def __getitem__(self, k: int) -> list[tuple[float, float]]:
        if k not in self.parsed:
            self.parsed[k] = _blocks(self.acks.le[k], self.acks.re[k])
        return self.parsed[k]

    def duplicate(self, k: int, start: float, end: float) -> bool:
        """ACK k reports bytes start..end received twice: a D-SACK (RFC 2883: its first SACK block lies
        below its cumulative ACK, or inside its second block) holding them."""
        blocks = self[k]
        if not blocks:
            return False
        (a, b), rest = blocks[0], blocks[1:]
        dup = b <= self.acks.ack[k] or (bool(rest) and rest[0][0] <= a and b <= rest[0][1])
        return dup and a <= start and end <= b


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


def _stream_parts(packets: pd.DataFrame, streams: set[int], broker_port: int) -> Iterator[tuple[_Copies, _Acks]]:
    """(data copies towards the broker, the broker's ACKs) of each stream in ``streams``, in frame order.

    The rows of each kind sorted once by (stream, frame), the columns needed taken as arrays, then
    sliced by stream: not a pass over every packet per stream, nor a copy of the table."""
    in_run = packets["stream"].isin(streams).to_numpy()
    is_data = in_run & (packets["dst_port"] == broker_port).to_numpy() & (packets["tcp_len"] > 0).to_numpy() \
        & packets["tcp_seq"].notna().to_numpy()
    is_ack = in_run & (packets["src_port"] == broker_port).to_numpy() & packets["tcp_ack"].notna().to_numpy()
    data = _Copies.of(packets, _in_stream_order(packets, is_data))
    acks = _Acks.of(packets, _in_stream_order(packets, is_ack))
    for stream in sorted(streams):
        part = data.part(stream)
        if len(part.frame):
            yield part, acks.part(stream)


def broker_losses(packets: pd.DataFrame, streams: set[int], broker_port: int) -> dict[str, Any]:
    """Copies of data segments towards the broker that it did not get, counted from the capture alone,
    and the runs of consecutive lost copies (the burstiness a Gilbert loss model sets)."""
    lost_all = [~_delivered(data, acks) for data, acks in _stream_parts(packets, streams, broker_port)]
    copies = sum(len(x) for x in lost_all)
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
