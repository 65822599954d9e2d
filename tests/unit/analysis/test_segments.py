"""Segment fates from the broker's ACKs (analysis/segments.py), on hand-made packet tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.analysis.segments import ByteRanges, broker_losses, runs_of

PORT = 1883


def _table(rows: list[tuple]) -> pd.DataFrame:
    """rows: ("d", seq, len) data to the broker, ("a", ack, "le|le", "re|re") an ACK from it."""
    out = []
    for frame, row in enumerate(rows, start=1):
        if row[0] == "d":
            out.append(dict(frame=frame, stream=0, src_port=50000, dst_port=PORT, tcp_len=row[2], tcp_seq=row[1],
                            tcp_ack=1, sack_le="", sack_re=""))
        else:
            le, re_ = (row[2], row[3]) if len(row) > 2 else ("", "")
            out.append(dict(frame=frame, stream=0, src_port=PORT, dst_port=50000, tcp_len=0, tcp_seq=1,
                            tcp_ack=row[1], sack_le=le, sack_re=re_))
    return pd.DataFrame(out)


def test_a_segment_acked_before_its_resend_was_delivered_one_never_acked_was_lost() -> None:
    rows = [("d", 1, 10), ("a", 11),          # delivered
            ("d", 11, 10), ("d", 21, 10),     # 11 lost, 21 arrives out of order
            ("a", 11, "21", "31"),            # dup ACK with SACK 21-31: 21 delivered
            ("d", 11, 10), ("a", 31)]         # the resend fills the hole
    fates = broker_losses(_table(rows), {0}, PORT)
    assert fates["tcp_copies_to_broker"] == 4
    assert fates["tcp_copies_lost_to_broker"] == 1
    assert fates["tcp_loss_runs_to_broker"] == 1 and fates["tcp_loss_run_mean"] == 1.0


def test_a_coalesced_resend_counts_each_lost_copy_once_and_a_lost_resend_too() -> None:
    rows = [("d", 1, 10), ("d", 11, 10), ("d", 21, 10),   # all three lost
            ("d", 1, 30),                                  # resent as one segment: lost again
            ("d", 1, 30), ("a", 31)]                       # delivered
    fates = broker_losses(_table(rows), {0}, PORT)
    assert fates["tcp_copies_lost_to_broker"] == 4
    assert fates["tcp_loss_runs_to_broker"] == 1 and fates["tcp_loss_run_max"] == 4


def test_a_spurious_resend_is_lost_only_without_a_dsack() -> None:
    delivered = [("d", 1, 10), ("a", 11), ("d", 1, 10), ("a", 11, "1", "11")]  # D-SACK: got it again
    dropped = [("d", 1, 10), ("a", 11), ("d", 1, 10), ("d", 11, 10), ("a", 21)]  # no D-SACK for the resend
    assert broker_losses(_table(delivered), {0}, PORT)["tcp_copies_lost_to_broker"] == 0
    assert broker_losses(_table(dropped), {0}, PORT)["tcp_copies_lost_to_broker"] == 1


def test_runs_of_counts_consecutive_true_values() -> None:
    assert runs_of(np.array([1, 1, 0, 1, 0, 0, 1, 1, 1], dtype=bool)).tolist() == [2, 1, 3]
    assert runs_of(np.array([], dtype=bool)).tolist() == []


def test_byte_ranges_say_whether_bytes_were_seen_and_keep_their_union() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        ranges, seen = ByteRanges(), set()
        for _ in range(30):
            start, length = int(rng.integers(0, 100)), int(rng.integers(1, 10))
            assert ranges.add(start, start + length) == any(b in seen for b in range(start, start + length))
            seen.update(range(start, start + length))
            union = {b for s, e in zip(ranges.starts, ranges.ends, strict=True) for b in range(int(s), int(e))}
            assert union == seen


def test_an_original_overtaken_by_later_segments_is_not_a_resend() -> None:
    from orchestrator.analysis.metrics import resent

    rows = [("d", 1, 10), ("d", 21, 10), ("d", 11, 10), ("d", 11, 10), ("d", 5, 20)]
    assert resent(_table(rows)).tolist() == [False, False, False, True, True]


def test_a_copy_answered_by_the_brokers_reset_reached_it_another_reset_proves_nothing() -> None:
    # the broker closed first; the client's last record (its ACK number 77) reaches a closed socket, and
    # the reset answering it carries seq 77 (RFC 793): delivered. A reset with another seq is no evidence.
    def closing(reset_seq: int) -> pd.DataFrame:
        table = _table([("d", 1, 10), ("a", 11), ("d", 11, 23), ("a", 11)])
        table.loc[2, "tcp_ack"] = 77
        rst = dict(frame=5, stream=0, src_port=PORT, dst_port=50000, tcp_len=0, tcp_seq=reset_seq, tcp_ack=0,
                   sack_le="", sack_re="", tcp_flags=0x04)
        return pd.concat([table.assign(tcp_flags=0x10), pd.DataFrame([rst])], ignore_index=True)

    assert broker_losses(closing(77), {0}, PORT)["tcp_copies_lost_to_broker"] == 0
    assert broker_losses(closing(78), {0}, PORT)["tcp_copies_lost_to_broker"] == 1


def test_a_reset_after_a_later_segment_does_not_answer_an_earlier_lost_copy() -> None:
    # copy 11-34 was dropped; the client's next segment 34-40 (same ACK number 77) reached the closed socket
    table = _table([("d", 1, 10), ("a", 11), ("d", 11, 23), ("d", 34, 6)])
    table.loc[[2, 3], "tcp_ack"] = 77
    rst = dict(frame=5, stream=0, src_port=PORT, dst_port=50000, tcp_len=0, tcp_seq=77, tcp_ack=0,
               sack_le="", sack_re="", tcp_flags=0x04)
    table = pd.concat([table.assign(tcp_flags=0x10), pd.DataFrame([rst])], ignore_index=True)
    assert broker_losses(table, {0}, PORT)["tcp_copies_lost_to_broker"] == 1  # 11-34 lost; 34-40 answered


def test_a_copy_resent_before_any_ack_was_delivered_when_a_dsack_reports_it_twice() -> None:
    # a tail loss probe: the client resends its last segment while the broker delays its ACK; the ACK that
    # follows acknowledges both and reports the bytes as received twice (D-SACK 1-11 below the ACK 11)
    probe = [("d", 1, 10), ("d", 1, 10), ("a", 11, "1", "11")]
    lost = [("d", 1, 10), ("d", 1, 10), ("a", 11)]  # the first copy never arrived: no duplicate reported
    fates = broker_losses(_table(probe), {0}, PORT)
    assert (fates["tcp_copies_to_broker"], fates["tcp_copies_lost_to_broker"]) == (2, 0)
    assert broker_losses(_table(lost), {0}, PORT)["tcp_copies_lost_to_broker"] == 1
    # a plain SACK (above the cumulative ACK) after the resend may be the resend's own: no evidence
    held = [("d", 1, 10), ("d", 11, 10), ("d", 11, 10), ("a", 1, "11", "21")]
    assert broker_losses(_table(held), {0}, PORT)["tcp_copies_lost_to_broker"] == 2
    # a D-SACK inside the second block (RFC 2883 section 4.1.2) counts as well
    above = [("d", 1, 10), ("d", 11, 10), ("d", 11, 10), ("a", 1, "11|11", "21|21")]
    assert broker_losses(_table(above), {0}, PORT)["tcp_copies_lost_to_broker"] == 1
