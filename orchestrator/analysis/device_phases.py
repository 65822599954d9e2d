"""The device's own TLS handshake phases beside the wire's split (issue 41, part 2; docs/connections.md, "The device's
own phases").

The device steps its handshake (firmware's tls_transport.cpp) and writes, per connection, in its connections log
(``logs/publisher_connections.csv``, columns appended after ``error``): when, on its monotonic clock and in ms since
its handshake began, it wrote its ClientHello (``hello_sent_ms``), read the server's flight (``flight_in_ms``:
ServerHelloDone for a full TLS 1.2 handshake, else the server's Finished), verified the server's certificate
(``verified_ms``; a resumed handshake has none), finished its key exchange (``kex_done_ms``: TLS 1.2 its
ClientKeyExchange written, TLS 1.3 the ServerHello's ECDHE) and wrote its Finished (``finished_sent_ms``); and
``device_busy_ms``: the device's own time from TCP connected to its CONNECT written, each stretch from the broker's
answer read (the first read after a send ends) to its next send, less the reads inside it. That is what the wire's
``split_device_ms`` measures (``analysis/handshake_split.py``), so the two are compared per connection:
``device_vs_wire_ms`` = device_busy_ms - split_device_ms, within ``device_wire_bound_ms``:

    bound = turns x (rtt + wake) + 2 x turns x RESOLUTION_MS

- the capture's resolution: each of a turn's two frame times is good to RESOLUTION_MS (dumpcap's pcapng, us);
- the path's latency: the wire takes one TCP round trip (``split_rtt_ms``, the SYN/ACK's) out of each turn, the
  device none; a turn's own round trip differs from TCP's by less than one round trip while the path holds;
- the device's wake-up (``device_wake_ms``): its clock counts, as waiting, the time from the broker's frame reaching
  it to its blocked read returning (its kernel and scheduler), which the wire counts as the device's. The connection
  measures it at its first turn: the device's own TCP connect time (SYN -> connect() returned) less the wire's (SYN
  -> its ACK of the SYN/ACK at the broker), at least 0. A device woken later in a later turn than in its first lands
  outside the bound, and is said (a warning).
- what the bound leaves out: the device busy while the broker sends what the device does not wait for (TLS 1.3's
  NewSessionTickets after the client's Finished, before its CONNECT): the wire gives that gap to the broker, the
  device's clock to the device (measured on loopback: up to 2 ms on a loaded host).

The device's figures are labelled with what they ran on (``clock``: the publisher summary's ``cpu_model``; a virtual
device's is the host's CPU, a board's its chip). A device whose log has no phases (a build before them), or whose
TLS ran inside Arduino's WiFiClientSecure (the whole handshake only), is said so, never compared.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

PHASES = ("hello_sent_ms", "flight_in_ms", "verified_ms", "kex_done_ms", "finished_sent_ms", "device_busy_ms")
COLUMNS = (*PHASES, "device_wake_ms", "device_vs_wire_ms", "device_wire_bound_ms")
RESOLUTION_MS = 0.001
NO_PHASES = "the device's connections log has no phase columns (a device built before them)"
WHOLE_ONLY = ("the device reports its whole handshake only (its TLS runs inside Arduino's WiFiClientSecure, which "
              "gives no steps)")


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(frame[col], errors="coerce") if col in frame else pd.Series(np.nan, index=frame.index)


def bound_ms(turns: float, rtt_ms: float, wake_ms: float) -> float:
    """The agreement bound of one connection (the module docstring's derivation)."""
    return turns * (rtt_ms + wake_ms) + 2 * turns * RESOLUTION_MS


def with_phases(rows: pd.DataFrame, claims: pd.DataFrame | None, positions: list[tuple[int, int]]) -> pd.DataFrame:
    """COLUMNS beside each wire row: ``positions`` pairs a row of ``rows`` with its claim's row (lifecycle.py)."""
    out = rows.copy()
    for col in COLUMNS:
        out[col] = np.nan
    if claims is None or "device_busy_ms" not in claims or not positions:
        return out
    at = [r for r, _ in positions]
    mine = claims.iloc[[c for _, c in positions]]
    for col in PHASES:
        out.loc[at, col] = _num(mine, col).to_numpy()
    wake = (_num(mine, "tcp_connect_ms").to_numpy() - _num(out.loc[at], "tcp_connect_ms").to_numpy()).clip(min=0)
    out.loc[at, "device_wake_ms"] = wake
    wire = _num(out, "split_device_ms")
    out["device_vs_wire_ms"] = out["device_busy_ms"] - wire
    turns, rtt = _num(out, "split_turns"), _num(out, "split_rtt_ms")
    out["device_wire_bound_ms"] = turns * (rtt + out["device_wake_ms"]) + 2 * turns * RESOLUTION_MS
    out.loc[out["device_vs_wire_ms"].isna(), "device_wire_bound_ms"] = np.nan
    return out


def _r(value: float) -> float | None:
    return None if pd.isna(value) else round(float(value), 3)


def _kind(part: pd.DataFrame) -> dict[str, Any]:
    both = part[part["device_vs_wire_ms"].notna()]
    diff = both["device_vs_wire_ms"].astype(float)
    return {"n": int(len(part)), "compared": int(len(both)),
            **{f"{c}_median": _r(_num(part, c).median()) for c in PHASES},
            "split_device_ms_median": _r(_num(both, "split_device_ms").median()),
            "device_vs_wire_ms_median": _r(diff.median()), "abs_device_vs_wire_ms_median": _r(diff.abs().median()),
            "abs_device_vs_wire_ms_max": _r(diff.abs().max()),
            "bound_ms_median": _r(both["device_wire_bound_ms"].astype(float).median()),
            "beyond_bound": int((diff.abs() > both["device_wire_bound_ms"].astype(float)).sum())}


def phases_block(rows: pd.DataFrame, claims: pd.DataFrame | None, clock: str | None,
                 tls: bool) -> dict[str, Any] | None:
    """metrics.json ``connections.device_phases``: per handshake kind, the device's phase medians and its busy time
    against the wire's; None for plain TCP, unavailable (with the reason) where the device gave no phases."""
    if not tls or claims is None:
        return None
    if "device_busy_ms" not in claims:
        return {"available": False, "reason": NO_PHASES, "clock": clock}
    if "device_busy_ms" not in rows or rows["device_busy_ms"].isna().all():
        whole = "handshake_ms" in claims and _num(claims, "handshake_ms").notna().any()
        return {"available": False, "reason": WHOLE_ONLY if whole else "no connection of the device finished its "
                "handshake", "clock": clock}
    return {"available": True, "clock": clock, "resolution_ms": RESOLUTION_MS,
            "bound": "turns x (TCP round trip + the device's wake-up at its first turn) + 2 x turns x resolution",
            "by_kind": {str(k): _kind(p) for k, p in rows.groupby("handshake", sort=True)}}


def phase_warnings(phases: dict[str, Any] | None) -> list[str]:
    """One warning per handshake kind whose device and wire disagree beyond the bound."""
    if not phases or not phases.get("available"):
        return []
    return [f"{kind} handshakes: the device's own busy time and the wire's device time disagree beyond the bound in "
            f"{k['beyond_bound']} of {k['compared']} connections (|device - wire| up to "
            f"{k['abs_device_vs_wire_ms_max']} ms, bound median {k['bound_ms_median']} ms; "
            f"clock: {phases.get('clock')})"
            for kind, k in phases["by_kind"].items() if k["beyond_bound"]]


def clock_label(summary: dict[str, Any] | None) -> str | None:
    """What the device's own times ran on: a virtual device's host CPU, a board's chip (the summary's cpu_model)."""
    model = (summary or {}).get("cpu_model")
    if not model:
        return None
    return f"host CPU {model} (virtual device)" if (summary or {}).get("simulated") else f"board {model}"
