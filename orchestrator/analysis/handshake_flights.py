"""A TLS handshake's round trips as the wire shows them (issue 25, part 2): ``handshake_round_trips`` of
connections.csv (orchestrator/analysis/connections.py defines the column; docs/connections.md too).

Only frames that carry TLS records count (a frame with a record content type or, for TLS 1.3 records tshark
could not decrypt, an opaque type); pure ACKs and continuation segments of a record do not. A *flight* is a run
of such frames from one side with no record-bearing frame of the other side in between. From the client's
ClientHello on, every client flight that follows a server flight is one round trip: the client waited for the
server. Counting stops at the client flight that may carry application data:

- TLS 1.3: the flight of the client's first encrypted record (outer type 23: its Finished, encrypted, with or
  without keys). RFC 8446 lets the client send application data right behind its Finished.
- TLS 1.2 and older: the flight of the client's first application-data record (content type 23, visible
  without keys). Without False Start the client waits for the server's Finished first.

So TLS 1.2 full = 2, TLS 1.2 abbreviated (resumed by ID or ticket) = 1, TLS 1.3 full = 1, TLS 1.3 PSK = 1, a
HelloRetryRequest adds one. None: plain MQTT, no ClientHello on the wire, or the connection ended before the
client reached that flight.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR

CT_APPDATA, HS_CLIENT_HELLO = 23, 1


def _has(cell: str, value: int) -> bool:
    return any(int(v, 0) == value for v in cell.split(AGGREGATOR) if v)


def round_trips(pk: pd.DataFrame, from_client: np.ndarray, version: str | None) -> int | None:
    """Round trips of the handshake of one TCP stream (``pk``: its frames in capture order with the columns
    ``ctype``, ``otype`` and ``hs_type`` of connections.CONNECTION_FIELDS; ``from_client`` per frame)."""
    tls13 = version == "TLS 1.3"
    started, server_flight, waits = False, False, 0
    for ctype, otype, hs, client in zip(pk["ctype"], pk["otype"], pk["hs_type"], from_client, strict=True):
        if not started:
            started = bool(client and hs and _has(hs, HS_CLIENT_HELLO))
            if not started:
                continue
        elif not (ctype or otype):
            continue
        elif not client:
            server_flight = True
            continue
        if server_flight:
            waits, server_flight = waits + 1, False
        if (bool(otype) if tls13 else _has(ctype, CT_APPDATA)):
            return waits
    return None
