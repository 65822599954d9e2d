"""TLS without key logs: PUBLISH found as application-data records and matched BY ORDER.

MEASUREMENT.md: "In TLS, messages are matched by decrypting with the clients' key logs; without
keys, by order within the TLS streams." A run's PUBLISH all have the same size (payload exactly P
bytes, one topic), so on the publisher's stream they are the client->broker application records
of the most common length, and on the subscriber's stream the broker->client ones (when several
sessions are in the capture, the one whose count is closest to the expected N). The k-th such
record on each leg is taken as sequence number k: exact while nothing is lost between publisher
and subscriber (TCP delivers in order; a QoS 0 drop inside the broker shifts every later match,
which is why the result carries a warning). MQTT lengths are unknown without keys, so
``tls_overhead`` stays empty.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.analysis.messages import PACKET_COLUMNS, PUBLISH, _flatten

APPLICATION_DATA = "23"


def application_records(packets: pd.DataFrame) -> pd.DataFrame:
    """One row per application-data TLS record, with its frame's columns and ``tls_record_len``.

    Record types: the content type when every record of the frame shows one (TLS 1.2), else the
    opaque type when only encrypted records are in the frame (TLS 1.3). Mixed frames are handshake.
    """
    t = packets[(packets["tls_rec_len"] != "").to_numpy()]
    n_len, lens = _flatten(t["tls_rec_len"])
    n_ct, cts = _flatten(t["tls_ctype"])
    n_op, ops = _flatten(t["tls_opaque"])
    has_ct = (t["tls_ctype"] != "").to_numpy()
    has_op = (t["tls_opaque"] != "").to_numpy()
    use_ct = has_ct & (n_ct == n_len)
    use_op = ~has_ct & has_op & (n_op == n_len)
    ct_flat = np.array(cts, dtype=object)
    op_flat = np.array(ops, dtype=object)
    types = np.full(int(n_len.sum()), "", dtype=object)
    len_row = np.repeat(np.arange(len(t)), n_len)
    ct_row_start = np.cumsum(n_ct) - n_ct
    op_row_start = np.cumsum(n_op) - n_op
    len_row_start = np.cumsum(n_len) - n_len
    pos = np.arange(len(len_row)) - len_row_start[len_row]
    ok_ct = use_ct[len_row]
    ok_op = use_op[len_row]
    types[ok_ct] = ct_flat[ct_row_start[len_row[ok_ct]] + pos[ok_ct]]
    types[ok_op] = op_flat[op_row_start[len_row[ok_op]] + pos[ok_op]]
    app = types == APPLICATION_DATA
    rows = len_row[app]
    recs = t[list(PACKET_COLUMNS)].iloc[rows].reset_index(drop=True)
    recs["tls_record_len"] = pd.array(np.array(lens, dtype=object)[app].astype(np.int64), dtype="Int64")
    recs["records_in_frame"] = np.bincount(rows, minlength=len(t))[rows]
    return recs


def _publish_leg(recs: pd.DataFrame, direction: pd.Series, expected: int) -> pd.DataFrame:
    """In ``direction``: per stream, the records of its most common length; the stream whose count
    is closest to ``expected`` (then the busiest) is the run's."""
    leg = recs[direction.to_numpy()]
    best: pd.DataFrame | None = None
    for _, s in leg.groupby("stream", sort=True):
        size = s["tls_record_len"].value_counts().idxmax()
        cand = s[(s["tls_record_len"] == size).to_numpy()]
        if best is None or (abs(len(cand) - expected), -len(cand)) < (abs(len(best) - expected), -len(best)):
            best = cand
    return (best if best is not None else leg).reset_index(drop=True)


def order_matched_publish(packets: pd.DataFrame, broker_port: int, payload_bytes: int,
                          samples_expected: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(inbound, outbound) PUBLISH in the shape of the decrypted message table, seq = order."""
    recs = application_records(packets)
    recs = recs[~recs["retrans"].to_numpy()]  # without keys a copy cannot be told from a gap filler
    legs = []
    for direction in (recs["dst_port"] == broker_port, recs["src_port"] == broker_port):
        leg = _publish_leg(recs, direction, samples_expected)
        leg = leg.assign(idx_in_frame=leg.groupby("frame").cumcount(), msgs_in_frame=leg["records_in_frame"],
                         mqtt_type=pd.array([PUBLISH] * len(leg), dtype="Int64"),
                         mqtt_len=pd.array([pd.NA] * len(leg), dtype="Int64"),
                         payload_len=pd.array([payload_bytes] * len(leg), dtype="Int64"),
                         seq=pd.array(np.arange(len(leg)), dtype="Int64"),
                         payload_t_send_us=pd.array([pd.NA] * len(leg), dtype="Int64"))
        legs.append(leg.drop(columns=["records_in_frame"]))
    return legs[0], legs[1]
