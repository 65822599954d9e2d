"""The one-pass analysis steps give exactly what the earlier per-stream code gave (per_stream_reference.py),
and the payload parser's fast path exactly what json gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import per_stream_reference as before
import pytest

from orchestrator.analysis import handshake, metrics, segments
from orchestrator.analysis.fields import ExportRequest, parse_fields
from orchestrator.analysis.messages import explode_mqtt
from orchestrator.backends import tshark
from orchestrator.clients import payload
from orchestrator.clients.payload import parse_message

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "analysis" / "json_t12_ecdsa_chacha"
# capture, broker port, TLS, key log (None: the TLS 1.2 "no keys" path of the handshake figures)
CAPTURES = {
    "t12chacha": ("lat_t12chacha.pcap", 8883, True, "lat_t12chacha.keys.log"),
    "t12chacha-no-keys": ("lat_t12chacha.pcap", 8883, True, None),
    "t12aes-no-keys": ("lat_t12aes.pcap", 8885, True, None),
    "t13chacha": ("lat_t13chacha.pcap", 8884, True, "lat_t13chacha.keys.log"),
    "plain": ("lat_plain.pcap", 1883, False, None),
}


def _tables(pcap: Path, port: int, tls: bool, keylogs: tuple[Path, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    packets = parse_fields(tshark.export_fields(ExportRequest(pcap, port, tls, keylogs)))
    return packets, explode_mqtt(packets)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_sessions_and_broker_losses_equal_the_per_stream_code(ref: Path, name: str) -> None:
    pcap, port, tls, keys = CAPTURES[name]
    packets, msgs = _tables(ref / pcap, port, tls, (ref / keys,) if keys else ())
    got = handshake.sessions(packets, msgs, port)
    assert got == before.sessions(packets, msgs, port)
    assert len(got) >= 2 and all(s["tcp_connect_ms"] is not None for s in got)
    if name.endswith("no-keys"):
        assert {s["tls_finished_from"] for s in got} == {"first record after ChangeCipherSpec (no keys)"}
    streams = {int(s) for s in packets["stream"].dropna().unique()}
    assert segments.broker_losses(packets, streams, port) == before.broker_losses(packets, streams, port)
    pd.testing.assert_series_equal(metrics.resent(packets), before.resent(packets))


def test_sessions_of_the_fixture_capture_equal_the_per_stream_code() -> None:
    keys = (FIXTURE / "publisher.keys.log", FIXTURE / "subscriber.keys.log")
    packets, msgs = _tables(FIXTURE / "tls_capture.pcapng", 18883, True, keys)
    assert handshake.sessions(packets, msgs, 18883) == before.sessions(packets, msgs, 18883)
    shuffled = packets.sample(frac=1.0, random_state=3)  # row order within a stream is what counts
    streams = {int(s) for s in packets["stream"].dropna().unique()}
    assert segments.broker_losses(shuffled, streams, 18883) == before.broker_losses(packets, streams, 18883)


PORT = 1883


def _random_stream(rng: np.random.Generator, stream: int) -> list[dict[str, object]]:
    """Data copies (resends, overlaps), cumulative ACKs, SACK blocks and resets in a random order."""
    rows: list[dict[str, object]] = []
    seq, acked = 1, 1
    for _ in range(int(rng.integers(1, 40))):
        kind = rng.choice(["data", "resend", "ack", "sack", "reset"], p=[0.4, 0.15, 0.3, 0.1, 0.05])
        if kind in ("data", "resend"):
            start = seq if kind == "data" else int(rng.integers(1, seq + 1))
            length = int(rng.integers(1, 30))
            seq = max(seq, start + length)
            rows.append(dict(stream=stream, src_port=50000 + stream, dst_port=PORT, tcp_len=length, tcp_seq=start,
                             tcp_ack=int(rng.integers(1, 4)), tcp_flags=0x18, sack_le="", sack_re=""))
            continue
        acked = seq if rng.random() < 0.5 else min(seq, acked + int(rng.integers(0, 40)))
        le = re_ = ""
        if kind == "sack":
            a = int(rng.integers(1, seq + 1))
            b = a + int(rng.integers(1, 30))
            le, re_ = f"{a}|{a + 3}", f"{b}|{b + 5}"
        rows.append(dict(stream=stream, src_port=PORT, dst_port=50000 + stream, tcp_len=0,
                         tcp_seq=int(rng.integers(1, 4)), tcp_ack=acked,
                         tcp_flags=0x14 if kind == "reset" else 0x10, sack_le=le, sack_re=re_))
    return rows


def test_broker_losses_equal_the_per_stream_code_on_random_streams() -> None:
    rng = np.random.default_rng(11)
    for _ in range(60):
        per_stream = [_random_stream(rng, s) for s in range(int(rng.integers(1, 6)))]
        owner = rng.permutation(np.repeat(np.arange(len(per_stream)), [len(x) for x in per_stream]))
        rows = [per_stream[s].pop(0) for s in owner.tolist()]  # streams interleaved, each in its own order
        table = pd.DataFrame(rows).assign(frame=np.arange(1, len(rows) + 1)).sample(frac=1.0, random_state=1)
        streams = {int(s) for s in table["stream"].unique()} | {99}  # a stream with no packet at all
        assert segments.broker_losses(table, streams, PORT) == before.broker_losses(table, streams, PORT)


def test_resent_equals_the_per_direction_walk_on_random_segments() -> None:
    rng = np.random.default_rng(9)
    for _ in range(80):
        n = int(rng.integers(1, 120))
        table = pd.DataFrame({
            "frame": rng.permutation(n) + 1, "stream": rng.integers(0, 4, n).astype(float),
            "src_port": rng.choice([1883.0, 50000.0], n),
            "tcp_seq": np.where(rng.random(n) < 0.05, np.nan, rng.integers(1, 300, n)),
            "tcp_len": np.where(rng.random(n) < 0.2, 0, rng.integers(1, 40, n)).astype(float)},
            index=rng.permutation(n) + 1000)  # not the positions: flags go by label
        table.loc[table.index[rng.random(n) < 0.05], "stream"] = np.nan
        pd.testing.assert_series_equal(metrics.resent(table), before.resent(table))
    mostly_in_order = pd.DataFrame({"frame": [1, 2, 3, 4], "stream": 0.0, "src_port": 1.0,
                                    "tcp_seq": [1.0, 11, 21, 11], "tcp_len": [10.0, 10, 10, 5]})
    assert metrics.resent(mostly_in_order).tolist() == [False, False, False, True]


def test_whole_lines_equal_the_growing_buffer() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        text = b"".join(b"x" * int(rng.integers(0, 50)) + b"\n" for _ in range(int(rng.integers(0, 60))))
        text += b"tail" * int(rng.integers(0, 2))
        cuts = np.sort(rng.integers(0, len(text) + 1, int(rng.integers(0, 30))))
        blocks = [text[a:b] for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(text)], strict=True)]
        chunk = int(rng.integers(1, 200))
        assert list(tshark._whole_lines(iter(blocks), chunk)) == list(before.whole_lines(iter(blocks), chunk))


def _json_only(data: bytes) -> tuple[str, int, int] | None:
    """parse_message as it was: json for every object payload."""
    if data[:1] != b"{":
        return parse_message(data)
    try:
        obj = json.loads(data)
        device = obj.get("d", "")
        return (device if isinstance(device, str) else str(device)), int(obj["n"]), int(obj["t"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


FIRMWARE = [b'{"d":"v1","n":42,"t":1764470000123456,"s":[0,4001,650,312],"x":"xxxx"}',
            b'{"d":"v1","n":1,"t":1764470000123456,"s":[0,4001,650,312],"x":""}',
            b'{"d":"v1","n":42,"t":1764470000123456,"s":[0,4001,650,312]      }',
            b'{"d":"f0042","n":0,"t":-5,"s":[1,4095,4095,9999]}',
            b'{"d":"","n":-0,"t":0,"s":[0,0,0,0],"x":"x"}',
            b'{"d":"a.b-c_D9","n":123456789012345678901234567890,"t":7,"s":[1]}']
ODD = [b'{"d":"v1","n":01,"t":5,"s":[0]}',  # a leading zero: not JSON
       b'{"d":"v1","n":1.5,"t":5,"s":[0]}', b'{"d":"v1","n":1e3,"t":5,"s":[0]}',
       b'{"d":"v1","n":1,"t":5,"s":[0],"x":"xx"',  # cut short
       b'{"d":"v1","n":1,"t":5,"s":[0],"x":"xx"}trailing', b'{"d":"v1","n":1,"t":5,"s":[0],"x":"xx"} \n',
       b'{"d":"v\\"1","n":1,"t":5,"s":[0]}', b'{"d":"v\\u00e91","n":1,"t":5,"s":[0]}',
       '{"d":"v\u00e91","n":1,"t":5,"s":[0]}'.encode(), b'{"d":"v\xff1","n":1,"t":5,"s":[0]}',
       b'{"d":"v\t1","n":1,"t":5,"s":[0]}', b'{"d":7,"n":1,"t":5,"s":[0]}', b'{"d":null,"n":1,"t":5}',
       b'{"d":"v1","n":"3","t":5,"s":[0]}', b'{"d":"v1","n":1,"t":5,"s":[0],"n":2}', b'{"d":"v1","t":5}',
       b'{"d":"v1","n":1,"t":5,"s":[]}', b'{"d":"v1","n":1,"t":5,"s":[0,]}', b'{ "d":"v1","n":1,"t":5}',
       b'{"n":3,"t":5}', b"[1,2]", b"{", b"", b"\xff{", b"00000012,0001800000000123456789,xxx", b"hello"]


def test_parse_message_fast_path_equals_json(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    generated = [b'{"d":"d%d","n":%d,"t":%d,"s":[%d,%d,%d,%d],"x":"%s"}' % (
        int(rng.integers(0, 1000)), int(rng.integers(0, 10**6)), int(rng.integers(0, 10**16)),
        *rng.integers(0, 5000, 4).tolist(), b"x" * int(rng.integers(0, 20))) for _ in range(200)]
    for data in FIRMWARE + ODD + generated:
        assert parse_message(data) == _json_only(data), data

    class NoJson:  # the firmware's own payloads never reach json
        @staticmethod
        def loads(_data: bytes) -> object:
            raise AssertionError("json used")

    monkeypatch.setattr(payload, "json", NoJson)
    assert [parse_message(d) for d in FIRMWARE + generated] == [_json_only(d) for d in FIRMWARE + generated]
    with pytest.raises(AssertionError):
        parse_message(ODD[0])
