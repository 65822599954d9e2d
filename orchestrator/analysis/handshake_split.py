"""Where a connection's set-up time goes, on the wire and without keys (issue 41, part 1): the ``split_*`` columns
of connections.csv (orchestrator/analysis/connections.py; docs/connections.md, "The handshake split").

The capture is taken in the broker's network namespace: a client frame's time is when it ARRIVED at the broker, a
server frame's when it LEFT. The span is the client's first SYN -> the broker's first CONNACK. Only the frames that
move the exchange on are looked at (*events*): those with a SYN flag, those carrying payload, and the client's ACK
that completes TCP's three-way handshake; a pure ACK is the other side's TCP answering, not its program, and is
left out. Each gap between two consecutive events goes to one part, by who held the exchange:

- the next event is the broker's (a client event -> a broker event, or within the broker's flight): ``broker``.
  The client's last frame was in and the broker had all it needed: its kernel (SYN/ACK), its TLS (ServerHello ...
  Finished, NewSessionTicket) and its MQTT (CONNECT -> CONNACK) time.
- client event -> client event (within one of the device's flights, or its ACK -> its ClientHello): ``device``.
- broker event -> client event (a *turn*: the device answered): one round trip plus the device's time. The round
  trip is TCP's own, the SYN/ACK out -> the client's completing ACK in: the device's kernel answers a SYN/ACK at
  once, so that gap is the path's round trip as the capture point sees it (``split_rtt_ms``). ``network`` gets
  min(round trip, gap) of each turn, ``device`` the rest: its key exchange, certificate verify, Finished.
- the device's TCP holding the broker: a gap that ends at a broker event within ``HELD_WITHIN`` of a pure ACK from
  the client (arrived inside the gap) is ``held`` up to that ACK (less one round trip, ``network``, as in a turn),
  ``broker`` after it. That is the broker's TCP
  holding a small segment until its earlier data is acknowledged (Nagle; Mosquitto leaves TCP_NODELAY off by default)
  while the device delays its ACK (about 40 ms on Linux): its release follows the ACK within microseconds, while a
  broker that merely finished its work at that moment would be a coincidence inside the bound.
- an event that resends bytes (a repeated SYN, a payload segment whose bytes were all seen before): the gap before
  it is ``network`` (loss recovery).

So the four parts add up to the span exactly, and nothing here reads a TLS record: TLS 1.3, whose flights after the
ServerHello are encrypted, splits the same as TLS 1.2, with or without keys. What keys would add and this does not
need: which message a flight holds (the device's Certificate vs its Finished in TLS 1.3; the broker's Finished vs
its NewSessionTicket), so a part is a sum over flights, not per message. What it cannot tell: a device whose
answer leaves while the round trip is still longer than TCP's (jitter on the path, a delayed ACK of the SYN/ACK) has
up to that difference counted as network; a flight held back by TCP (congestion window, Nagle) counts as its
sender's time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
HELD_WITHIN = 0.001  # s: a broker segment this soon after the client's ACK was released by it
CT_APPDATA = 23
SPLIT = ("split_span_ms", "split_device_ms", "split_broker_ms", "split_network_ms", "split_held_ms", "split_rtt_ms",
         "split_turns", "split_end_from")
EMPTY: dict[str, Any] = dict.fromkeys(SPLIT)


def _events(pk: pd.DataFrame, client: np.ndarray, end: int) -> tuple[list[int], float | None]:
    """Rows (positions in ``pk``) of the events up to row ``end``, and TCP's round trip (s) or None."""
    flags = pk["tcp_flags"].to_numpy()
    length = pk["tcp_len"].fillna(0).to_numpy()
    times = pk["time"].to_numpy(dtype=float)
    rows: list[int] = []
    synack_t: float | None = None
    rtt: float | None = None
    for i in range(end + 1):
        syn, data = bool(flags[i] & SYN), length[i] > 0
        completes = (rtt is None and synack_t is not None and client[i] and (flags[i] & (SYN | ACK)) == ACK)
        if completes:
            rtt = times[i] - float(synack_t or 0.0)
        if syn and not client[i] and synack_t is None:
            synack_t = times[i]
        if syn or data or completes:
            rows.append(i)
    return rows, rtt


def _client_acks(pk: pd.DataFrame, client: np.ndarray, end: int) -> np.ndarray:
    """Times of the client's pure ACKs (no SYN, FIN, RST or payload) up to row ``end``."""
    flags, length = pk["tcp_flags"].to_numpy()[: end + 1], pk["tcp_len"].fillna(0).to_numpy()[: end + 1]
    pure = client[: end + 1] & ((flags & (SYN | FIN | RST)) == 0) & (length <= 0)
    return np.sort(pk["time"].to_numpy(dtype=float)[: end + 1][pure])


def _resends(pk: pd.DataFrame, rows: list[int], client: np.ndarray) -> list[bool]:
    """Per event: it carries only bytes (or a SYN) its side sent before."""
    seq = pk["seq_raw"].to_numpy(dtype=float)
    length = pk["tcp_len"].fillna(0).to_numpy(dtype=float)
    flags = pk["tcp_flags"].to_numpy()
    base: dict[bool, float] = {}
    top: dict[bool, float] = {}
    syns: set[bool] = set()
    out = []
    for i in rows:
        side = bool(client[i])
        if flags[i] & SYN:
            out.append(side in syns)
            syns.add(side)
        elif length[i] <= 0 or np.isnan(seq[i]):
            out.append(False)
        else:
            start = (seq[i] - base.setdefault(side, seq[i])) % (1 << 32)
            start = start - (1 << 32) if start > (1 << 31) else start  # modulo wrap
            end = start + length[i]
            out.append(side in top and end <= top[side])
            top[side] = max(top.get(side, end), end)
    return out


def _held(acks: np.ndarray, start: float, end: float) -> float:
    """ms of the gap (start, end) before a client ACK that released the broker's event at ``end``."""
    inside = acks[(acks > start) & (acks < end)]
    return (inside[-1] - start) * 1000.0 if len(inside) and end - inside[-1] <= HELD_WITHIN else 0.0


def connack_without_keys(pk: pd.DataFrame, from_client: np.ndarray) -> int | None:
    """TLS 1.2 without keys: the position of the broker's first application-data record after the client's first
    (MQTT's client speaks first: CONNECT, then the broker's CONNACK). TLS 1.3 hides the record type, and its
    NewSessionTickets are application-data records too: None."""
    ctype = pk["ctype"].to_numpy(dtype=object)
    has = np.array([str(CT_APPDATA) in str(v).split(AGGREGATOR) if v else False for v in ctype], dtype=bool)
    first_client = np.flatnonzero(has & from_client)
    if not len(first_client):
        return None
    later = np.flatnonzero(has & ~from_client & (np.arange(len(pk)) > first_client[0]))
    return int(later[0]) if len(later) else None


def split(pk: pd.DataFrame, from_client: np.ndarray, connack_row: int | None,
          end_from: str = "CONNACK") -> dict[str, Any]:
    """The ``split_*`` columns of one TCP stream (``pk``: its frames in capture order; ``from_client`` per frame;
    ``connack_row``: the position in ``pk`` of the broker's first CONNACK, None when there is none)."""
    if connack_row is None or not len(pk):
        return dict(EMPTY)
    flags = pk["tcp_flags"].to_numpy()
    first = np.flatnonzero(from_client & ((flags & (SYN | ACK)) == SYN))
    if not len(first) or first[0] > connack_row:
        return dict(EMPTY)
    rows, rtt = _events(pk, from_client, connack_row)
    rows = [r for r in rows if r >= first[0]]
    if rtt is None:
        return dict(EMPTY)
    acks = _client_acks(pk, from_client, connack_row)
    times = pk["time"].to_numpy(dtype=float)
    resent = _resends(pk, rows, from_client)
    parts = {"device": 0.0, "broker": 0.0, "network": 0.0, "held": 0.0}
    turns = 0
    for (a, b), again in zip(zip(rows, rows[1:], strict=False), resent[1:], strict=True):
        gap = (times[b] - times[a]) * 1000.0
        if again:
            parts["network"] += gap
        elif not from_client[b]:
            held = _held(acks, times[a], times[b])
            net = min(rtt * 1000.0, held)
            turns += held > 0
            parts["network"] += net
            parts["held"] += held - net
            parts["broker"] += gap - held
        elif from_client[a]:
            parts["device"] += gap
        else:
            turns += 1
            net = min(rtt * 1000.0, gap)
            parts["network"] += net
            parts["device"] += gap - net
    return {"split_span_ms": (times[connack_row] - times[first[0]]) * 1000.0,
            "split_device_ms": parts["device"], "split_broker_ms": parts["broker"],
            "split_network_ms": parts["network"], "split_held_ms": parts["held"], "split_rtt_ms": rtt * 1000.0,
            "split_turns": turns, "split_end_from": end_from}
