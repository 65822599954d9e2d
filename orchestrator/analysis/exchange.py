"""Per message, the whole QoS exchange from the capture: its PUBLISH (and DUP resends), PUBACK, or PUBREC, PUBREL
and PUBCOMP, paired by packet id, with the bytes each way (docs/qos-sessions.md).

The packets come from the run's one export pass (:func:`packets_of_table`, called on each chunk of it: tshark's
header flags, length and packet id of every MQTT packet, and the TLS records of each frame, among the run's
fields), or from an export of :data:`EXCHANGE_FIELDS` alone (:func:`parse_packets`). Every MQTT packet has header
flags and a length; only PUBLISH at QoS 1/2 and the acknowledgements carry a packet id, so a frame's ids are
given, in order, to its packets of those types (tshark prints a frame's fields in packet order).

The publisher's streams are those on which PUBLISHes go to the broker; the exchanges are paired across them in
time order (a persistent session carries its unacknowledged messages onto the next connection), a packet id
being its device's own (a fleet's devices are told apart by their payloads): a PUBLISH
without DUP opens the exchange of its packet id, a DUP PUBLISH or PUBREL joins the one open under its id, PUBREC
joins it, and PUBACK or PUBCOMP ends it. A QoS 0 PUBLISH is an exchange of one packet.

Wire bytes of a packet: plain TCP, the MQTT packet itself; TLS, its application-data record with the 5-byte
header (the record's length field + 5), when the frame holds exactly one such record per MQTT packet (else
missing: the record boundaries do not say which packet is whose).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.clients.payload import parse_message
from orchestrator.model.export import AGGREGATOR, ExportRequest

EXCHANGE_FIELDS: tuple[str, ...] = (
    "frame.number", "frame.time_epoch", "tcp.stream", "tcp.srcport", "tcp.dstport", "tls.record.content_type",
    "tls.record.length", "mqtt.hdrflags", "mqtt.len", "mqtt.msgid", "mqtt.msg",
)
EXCHANGE_ONLY = ("mqtt_hdrflags", "mqtt_msgid")  # the run export's columns only the exchanges read
PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 3, 4, 5, 6, 7
_HAS_ID = (PUBACK, PUBREC, PUBREL, PUBCOMP)
TLS_RECORD_HEADER = 5
TLS_APPLICATION_DATA = "23"
EXCHANGE_COLUMNS = ("seq", "qos", "packet_id", "complete", "publishes", "dup_resends", "packets_up", "packets_down",
                    "mqtt_bytes_up", "mqtt_bytes_down", "mqtt_bytes", "wire_bytes_up", "wire_bytes_down",
                    "wire_bytes", "t_publish", "t_done", "ack_ms_capture", "streams")


def exchange_request(base: ExportRequest) -> ExportRequest:
    """The run's export request with this module's fields (the same capture, port and key logs)."""
    return replace(base, fields=EXCHANGE_FIELDS)


@dataclass(slots=True)
class MqttPacket:
    """One MQTT packet of the capture. Slotted: a fleet's capture gives a million of them, each 352 bytes with a
    __dict__ and 120 without."""

    frame: int
    time: float
    stream: int
    up: bool  # towards the broker
    type: int
    flags: int
    mqtt_len: int  # the whole packet: fixed header + remaining length
    packet_id: int | None
    wire_len: int | None
    payload_hex: str = ""
    seq: int | None = None  # read from the payload already (then payload_hex is not kept)
    device: str = ""  # the payload's device (a fleet's; "" for one device), read with seq


def _remaining_header(remaining: int) -> int:
    return 1 + (1 if remaining < 128 else 2 if remaining < 16384 else 3 if remaining < 2097152 else 4)


def _split(text: str) -> list[str]:
    return text.split(AGGREGATOR) if text else []


def _frame_packets(frame: int, t: float, stream: int, up: bool, ctypes: str, rlens: str, flags: str, lens: str,
                   ids: str, msgs: str, keep_payload: bool = True) -> list[MqttPacket]:
    hdr = [int(f, 16) for f in _split(flags)]
    remaining = [int(n) for n in _split(lens)]
    if not hdr or len(hdr) != len(remaining):
        return []
    id_list = [int(i) for i in _split(ids)]
    payloads = _split(msgs)
    app = [int(r) for c, r in zip(_split(ctypes), _split(rlens), strict=False) if c == TLS_APPLICATION_DATA]
    tls = bool(ctypes)
    out: list[MqttPacket] = []
    for i, (h, rem) in enumerate(zip(hdr, remaining, strict=True)):
        kind = h >> 4
        wants_id = kind in _HAS_ID or (kind == PUBLISH and (h >> 1) & 3 > 0)
        pid = id_list.pop(0) if wants_id and id_list else None
        size = rem + _remaining_header(rem)
        wire = (app[i] + TLS_RECORD_HEADER if len(app) == len(hdr) else None) if tls else size
        payload = payloads.pop(0) if kind == PUBLISH and payloads else ""
        if keep_payload or not (up and payload):
            out.append(MqttPacket(frame, t, stream, up, kind, h, size, pid, wire, payload))
        else:  # its sequence number and device are all an exchange needs of it
            seq, device = _seq_device(payload)
            out.append(MqttPacket(frame, t, stream, up, kind, h, size, pid, wire, "", seq, device))
    return out


def parse_packets(text: str, broker_port: int) -> list[MqttPacket]:
    """The exported text of :data:`EXCHANGE_FIELDS` -> its MQTT packets, in capture order."""
    packets: list[MqttPacket] = []
    for line in text.splitlines():
        cols = line.split("\t")
        if len(cols) == len(EXCHANGE_FIELDS) and cols[7]:
            frame, t, stream, _sport, dport, ctypes, rlens, flags, lens, ids, msgs = cols
            packets += _frame_packets(int(frame), float(t), int(stream), int(dport) == broker_port, ctypes, rlens,
                                      flags, lens, ids, msgs)
    return packets


def packets_of_table(part: pd.DataFrame, broker_port: int) -> list[MqttPacket]:
    """A chunk of the run's export (analysis/fields.py parse_fields) -> its MQTT packets, in capture order: the
    exchanges' share of the run's one export pass. Only the sequence number of a PUBLISH is kept, not its payload
    (a fleet's capture holds hundreds of thousands)."""
    m = part[part["mqtt_hdrflags"] != ""]
    packets: list[MqttPacket] = []
    for frame, t, stream, dport, ctypes, rlens, flags, lens, ids, msgs in zip(
            m["frame"], m["time"], m["stream"], m["dst_port"], m["tls_ctype"], m["tls_rec_len"], m["mqtt_hdrflags"],
            m["mqtt_len"], m["mqtt_msgid"], m["mqtt_msg"], strict=True):
        packets += _frame_packets(int(frame), float(t), int(stream), int(dport) == broker_port, str(ctypes),
                                  str(rlens), flags, str(lens), ids, msgs, keep_payload=False)
    return packets


@dataclass(slots=True)
class _Exchange:
    """One message's exchange, counted as its packets come (a fleet's capture has hundreds of thousands: no list
    of packets and no row dict is kept per message)."""

    qos: int
    packet_id: int | None
    seq: int | None
    t_publish: float
    done: float | None = None
    publishes: int = 0
    dup_resends: int = 0
    packets_up: int = 0
    packets_down: int = 0
    mqtt_up: int = 0
    mqtt_down: int = 0
    wire_up: int | None = 0  # None once a packet's record bytes are unknown
    wire_down: int | None = 0
    streams: tuple[int, ...] = ()

    def add(self, p: MqttPacket) -> None:
        if p.up:
            self.packets_up += 1
            self.mqtt_up += p.mqtt_len
            self.wire_up = None if self.wire_up is None or p.wire_len is None else self.wire_up + p.wire_len
            if p.type == PUBLISH:
                self.publishes += 1
                self.dup_resends += 1 if p.flags & 0x08 else 0
        else:
            self.packets_down += 1
            self.mqtt_down += p.mqtt_len
            self.wire_down = None if self.wire_down is None or p.wire_len is None else self.wire_down + p.wire_len
        if p.stream not in self.streams:
            self.streams += (p.stream,)


def _columns(done: list[_Exchange]) -> dict[str, list[object]]:
    """:data:`EXCHANGE_COLUMNS`, each a list over the exchanges."""
    def both(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else a + b

    return {
        "seq": [e.seq for e in done], "qos": [e.qos for e in done], "packet_id": [e.packet_id for e in done],
        "complete": [e.done is not None for e in done], "publishes": [e.publishes for e in done],
        "dup_resends": [e.dup_resends for e in done], "packets_up": [e.packets_up for e in done],
        "packets_down": [e.packets_down for e in done], "mqtt_bytes_up": [e.mqtt_up for e in done],
        "mqtt_bytes_down": [e.mqtt_down for e in done], "mqtt_bytes": [e.mqtt_up + e.mqtt_down for e in done],
        "wire_bytes_up": [e.wire_up for e in done], "wire_bytes_down": [e.wire_down for e in done],
        "wire_bytes": [both(e.wire_up, e.wire_down) for e in done], "t_publish": [e.t_publish for e in done],
        "t_done": [e.done for e in done],
        "ack_ms_capture": [None if e.done is None else (e.done - e.t_publish) * 1000.0 for e in done],
        "streams": [len(e.streams) for e in done],
    }


def _seq_device(payload_hex: str) -> tuple[int | None, str]:
    parsed = parse_message(bytes.fromhex(payload_hex)) if payload_hex else None
    return (parsed[1], parsed[0]) if parsed else (None, "")


_ALONE = ("time", "frame", "stream", "qos", "flags", "size", "wire", "seq")  # a PUBLISH without a packet id


class ExchangePackets:
    """The packets a run's exchanges are made of, gathered chunk by chunk (:meth:`add`) in capture order.

    A PUBLISH to the broker without a packet id (QoS 0) is an exchange of its own that nothing joins: it is kept
    as a row of columns (a fleet's capture holds hundreds of thousands). The PUBLISH at QoS 1/2 and the
    acknowledgements are kept as they are, for the pairing; every other packet (the broker's PUBLISH to the
    subscribers, CONNECT, PINGREQ ...) is never part of an exchange and is not kept.
    """

    def __init__(self, packets: Iterable[MqttPacket] = ()) -> None:
        self.alone: dict[str, array[Any]] = {k: array("d" if k == "time" else "q") for k in _ALONE}
        self.paired: list[MqttPacket] = []
        self.publisher_streams: set[int] = set()  # the streams with a PUBLISH to the broker
        self.devices: set[str] = set()
        self.add(packets)

    def add(self, packets: Iterable[MqttPacket]) -> None:
        alone = self.alone
        for p in packets:
            if p.type == PUBLISH and p.up:
                self.publisher_streams.add(p.stream)
                seq, device = (p.seq, p.device) if not p.payload_hex else _seq_device(p.payload_hex)
                self.devices.add(device)
                if p.packet_id is not None:
                    self.paired.append(replace(p, payload_hex="", seq=seq, device=device))
                    continue
                for k, v in zip(_ALONE, (p.time, p.frame, p.stream, (p.flags >> 1) & 3, p.flags, p.mqtt_len,
                                         -1 if p.wire_len is None else p.wire_len, -1 if seq is None else seq),
                                strict=True):
                    alone[k].append(v)
            elif p.type in _HAS_ID:
                self.paired.append(p)


def _paired(gathered: ExchangePackets) -> list[_Exchange]:
    """The exchanges of the PUBLISH with a packet id, in the order they closed (then those left open).

    A packet id is a device's own (a fleet's devices count their ids apart): the key is (device, packet id), a
    stream's device that of its PUBLISH to the broker, or the one device when a stream has shown none yet (a
    PUBREL resent on a new connection)."""
    sole = next(iter(gathered.devices)) if len(gathered.devices) == 1 else None
    device_of: dict[int, str] = {}
    done: list[_Exchange] = []
    open_: dict[tuple[str, int | None], _Exchange] = {}
    ours = (p for p in gathered.paired if p.stream in gathered.publisher_streams)
    for p in sorted(ours, key=lambda p: (p.time, p.frame)):
        if p.type == PUBLISH:
            device_of[p.stream] = p.device
            key = (p.device, p.packet_id)
            ex = open_.get(key) if p.flags & 0x08 else None
            if ex is None:
                if key in open_:
                    done.append(open_.pop(key))  # its id reused: the old one never completed
                ex = open_[key] = _Exchange((p.flags >> 1) & 3, p.packet_id, p.seq, p.time)
            ex.add(p)
            continue
        device = device_of.get(p.stream, sole)
        ex = open_.get((device, p.packet_id)) if device is not None else None
        if device is None or ex is None:
            continue
        ex.add(p)
        if (p.type == PUBACK and ex.qos == 1) or (p.type == PUBCOMP and ex.qos == 2):
            ex.done = p.time
            done.append(open_.pop((device, p.packet_id)))
    return done + list(open_.values())


_SENTINEL = ("seq", "wire_bytes_up", "wire_bytes")  # -1 where the value is missing (None in the table)


def _alone(gathered: ExchangePackets) -> dict[str, np.ndarray]:
    """:data:`EXCHANGE_COLUMNS` of the exchanges of one PUBLISH each, as arrays in time order (-1 for a
    missing :data:`_SENTINEL` value)."""
    a: dict[str, np.ndarray] = {k: np.array(v, dtype=np.float64 if k == "time" else np.int64)
                                for k, v in gathered.alone.items()}
    order = np.lexsort((np.arange(len(a["time"])), a["frame"], a["time"]))
    a = {k: v[order] for k, v in a.items()}
    n = len(order)
    ones, zeros = np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    return {
        "seq": a["seq"], "qos": a["qos"], "packet_id": np.full(n, None, dtype=object),
        "complete": np.ones(n, dtype=bool), "publishes": ones,
        "dup_resends": ((a["flags"] & 0x08) > 0).astype(np.int64),
        "packets_up": ones, "packets_down": zeros, "mqtt_bytes_up": a["size"], "mqtt_bytes_down": zeros,
        "mqtt_bytes": a["size"], "wire_bytes_up": a["wire"], "wire_bytes_down": zeros, "wire_bytes": a["wire"],
        "t_publish": a["time"], "t_done": a["time"], "ack_ms_capture": np.zeros(n), "streams": ones,
    }


def _as_list(name: str, values: np.ndarray) -> list[object]:
    out = values.tolist()
    return [None if v < 0 else v for v in out] if name in _SENTINEL else out


def exchanges(packets: list[MqttPacket] | ExchangePackets) -> pd.DataFrame:
    """One row per message (:data:`EXCHANGE_COLUMNS`), in the order the messages were first published (a
    message's time, then its sequence number). A table of QoS 0 PUBLISH alone is made of arrays (a fleet's has
    hundreds of thousands of rows), typed as pandas types the lists it is otherwise made of."""
    gathered = packets if isinstance(packets, ExchangePackets) else ExchangePackets(packets)
    alone, paired = _alone(gathered), _paired(gathered)
    cols: dict[str, list[object] | np.ndarray]
    if paired or not len(alone["seq"]):
        lists = {k: _as_list(k, v) for k, v in alone.items()}
        for name, values in _columns(paired).items():
            lists[name] += values
        seq_key = np.array([-1 if q is None else q for q in lists["seq"]], dtype=np.int64)
        t = np.array(lists["t_publish"], dtype=np.float64)
        cols = dict(lists)
    else:
        cols = {k: _as_list(k, v) if k in _SENTINEL and (v < 0).any() else v for k, v in alone.items()}
        seq_key, t = alone["seq"], alone["t_publish"]
    order = np.lexsort((seq_key, t))
    if (np.diff(order) != 1).any():  # else in order already (a QoS 0 cell's are)
        cols = {k: [v[i] for i in order.tolist()] if isinstance(v, list) else v[order] for k, v in cols.items()}
    return pd.DataFrame(cols, columns=list(EXCHANGE_COLUMNS))


def with_device_acks(table: pd.DataFrame, acks: pd.DataFrame | None) -> pd.DataFrame:
    """The exchanges with the device's own time to PUBACK / PUBCOMP (``ack_ms_device``, its monotonic clock;
    analysis/logs.py read_publisher_acks) joined by seq."""
    if acks is None or table.empty:
        return table.assign(ack_ms_device=pd.Series(dtype="Float64"))
    dev = acks.drop_duplicates("seq").assign(ack_ms_device=lambda d: d["ack_us"].astype("Float64") / 1000.0)
    out = table.astype({"seq": "Int64"}).merge(dev[["seq", "ack_ms_device"]], on="seq", how="left")
    return out


def summary(table: pd.DataFrame) -> dict[str, object]:
    """What a cell's messages cost, exchange by exchange (complete ones; medians, and the DUP resends)."""
    full = table[table["complete"].astype(bool)]  # an empty table's column is of objects
    med = full[["mqtt_bytes_up", "mqtt_bytes_down", "mqtt_bytes", "wire_bytes_up", "wire_bytes_down",
                "wire_bytes", "packets_up", "packets_down"]].astype("Float64").median()
    return {
        "messages": int(len(table)), "complete": int(len(full)),
        "dup_resends": int(table["dup_resends"].sum()),
        **{f"median_{k}": (None if pd.isna(v) else float(v)) for k, v in med.items()},
    }
