"""Per message, the whole QoS exchange from the capture: its PUBLISH (and DUP resends), PUBACK, or PUBREC, PUBREL
and PUBCOMP, paired by packet id, with the bytes each way (docs/qos-sessions.md).

The packets come from the run's one export pass (:func:`packets_of_table`, called on each chunk of it: tshark's
header flags, length and packet id of every MQTT packet, and the TLS records of each frame, among the run's
fields), or from an export of :data:`EXCHANGE_FIELDS` alone (:func:`parse_packets`). Every MQTT packet has header
flags and a length; only PUBLISH at QoS 1/2 and the acknowledgements carry a packet id, so a frame's ids are
given, in order, to its packets of those types (tshark prints a frame's fields in packet order).

The publisher's streams are those on which PUBLISHes go to the broker; the exchanges are paired across them in
time order (a persistent session carries its unacknowledged messages onto the next connection): a PUBLISH
without DUP opens the exchange of its packet id, a DUP PUBLISH or PUBREL joins the one open under its id, PUBREC
joins it, and PUBACK or PUBCOMP ends it. A QoS 0 PUBLISH is an exchange of one packet.

Wire bytes of a packet: plain TCP, the MQTT packet itself; TLS, its application-data record with the 5-byte
header (the record's length field + 5), when the frame holds exactly one such record per MQTT packet (else
missing: the record boundaries do not say which packet is whose).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
class Packet:
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


def _remaining_header(remaining: int) -> int:
    return 1 + (1 if remaining < 128 else 2 if remaining < 16384 else 3 if remaining < 2097152 else 4)


def _split(text: str) -> list[str]:
    return text.split(AGGREGATOR) if text else []


def _frame_packets(frame: int, t: float, stream: int, up: bool, ctypes: str, rlens: str, flags: str, lens: str,
                   ids: str, msgs: str, keep_payload: bool = True) -> list[Packet]:
    hdr = [int(f, 16) for f in _split(flags)]
    remaining = [int(n) for n in _split(lens)]
    if not hdr or len(hdr) != len(remaining):
        return []
    id_list = [int(i) for i in _split(ids)]
    payloads = _split(msgs)
    app = [int(r) for c, r in zip(_split(ctypes), _split(rlens), strict=False) if c == TLS_APPLICATION_DATA]
    tls = bool(ctypes)
    out: list[Packet] = []
    for i, (h, rem) in enumerate(zip(hdr, remaining, strict=True)):
        kind = h >> 4
        wants_id = kind in _HAS_ID or (kind == PUBLISH and (h >> 1) & 3 > 0)
        pid = id_list.pop(0) if wants_id and id_list else None
        size = rem + _remaining_header(rem)
        wire = (app[i] + TLS_RECORD_HEADER if len(app) == len(hdr) else None) if tls else size
        payload = payloads.pop(0) if kind == PUBLISH and payloads else ""
        if keep_payload or not (up and payload):
            out.append(Packet(frame, t, stream, up, kind, h, size, pid, wire, payload))
        else:  # its sequence number is all an exchange needs of it
            out.append(Packet(frame, t, stream, up, kind, h, size, pid, wire, "", _seq_of(payload)))
    return out


def parse_packets(text: str, broker_port: int) -> list[Packet]:
    """The exported text of :data:`EXCHANGE_FIELDS` -> its MQTT packets, in capture order."""
    packets: list[Packet] = []
    for line in text.splitlines():
        cols = line.split("\t")
        if len(cols) == len(EXCHANGE_FIELDS) and cols[7]:
            frame, t, stream, _sport, dport, ctypes, rlens, flags, lens, ids, msgs = cols
            packets += _frame_packets(int(frame), float(t), int(stream), int(dport) == broker_port, ctypes, rlens,
                                      flags, lens, ids, msgs)
    return packets


def packets_of_table(part: pd.DataFrame, broker_port: int) -> list[Packet]:
    """A chunk of the run's export (analysis/fields.py parse_fields) -> its MQTT packets, in capture order: the
    exchanges' share of the run's one export pass. Only the sequence number of a PUBLISH is kept, not its payload
    (a fleet's capture holds hundreds of thousands)."""
    m = part[part["mqtt_hdrflags"] != ""]
    packets: list[Packet] = []
    for frame, t, stream, dport, ctypes, rlens, flags, lens, ids, msgs in zip(
            m["frame"], m["time"], m["stream"], m["dst_port"], m["tls_ctype"], m["tls_rec_len"], m["mqtt_hdrflags"],
            m["mqtt_len"], m["mqtt_msgid"], m["mqtt_msg"], strict=True):
        packets += _frame_packets(int(frame), float(t), int(stream), int(dport) == broker_port, str(ctypes),
                                  str(rlens), flags, str(lens), ids, msgs, keep_payload=False)
    return packets


@dataclass
class _Exchange:
    qos: int
    packet_id: int | None
    seq: int | None
    t_publish: float
    packets: list[Packet] = field(default_factory=list)
    done: float | None = None

    def row(self) -> dict[str, object]:
        up = [p for p in self.packets if p.up]
        down = [p for p in self.packets if not p.up]
        pubs = [p for p in up if p.type == PUBLISH]

        def wire(ps: list[Packet]) -> int | None:
            return None if any(p.wire_len is None for p in ps) else sum(p.wire_len or 0 for p in ps)

        w_up, w_down = wire(up), wire(down)
        return {
            "seq": self.seq, "qos": self.qos, "packet_id": self.packet_id, "complete": self.done is not None,
            "publishes": len(pubs), "dup_resends": sum(1 for p in pubs if p.flags & 0x08),
            "packets_up": len(up), "packets_down": len(down),
            "mqtt_bytes_up": sum(p.mqtt_len for p in up), "mqtt_bytes_down": sum(p.mqtt_len for p in down),
            "mqtt_bytes": sum(p.mqtt_len for p in self.packets),
            "wire_bytes_up": w_up, "wire_bytes_down": w_down,
            "wire_bytes": None if w_up is None or w_down is None else w_up + w_down,
            "t_publish": self.t_publish, "t_done": self.done,
            "ack_ms_capture": None if self.done is None else (self.done - self.t_publish) * 1000.0,
            "streams": len({p.stream for p in self.packets}),
        }


def _seq_of(payload_hex: str) -> int | None:
    parsed = parse_message(bytes.fromhex(payload_hex)) if payload_hex else None
    return parsed[1] if parsed else None


def _seq(p: Packet) -> int | None:
    return p.seq if p.seq is not None else _seq_of(p.payload_hex)


def exchanges(packets: list[Packet]) -> pd.DataFrame:
    """One row per message (:data:`EXCHANGE_COLUMNS`), in the order the messages were first published."""
    publisher = {p.stream for p in packets if p.up and p.type == PUBLISH}
    done: list[_Exchange] = []
    open_: dict[int, _Exchange] = {}
    for p in sorted((p for p in packets if p.stream in publisher), key=lambda p: (p.time, p.frame)):
        if p.type == PUBLISH and p.up:
            qos = (p.flags >> 1) & 3
            ex = open_.get(p.packet_id) if (p.flags & 0x08 and p.packet_id is not None) else None
            if ex is None:
                if p.packet_id is not None and p.packet_id in open_:
                    done.append(open_.pop(p.packet_id))  # its id reused: the old one never completed
                ex = _Exchange(qos, p.packet_id, _seq(p), p.time)
                if qos == 0 or p.packet_id is None:
                    ex.done = p.time
                    done.append(ex)
                else:
                    open_[p.packet_id] = ex
            ex.packets.append(p)
        elif p.type in _HAS_ID and p.packet_id in open_:
            ex = open_[p.packet_id]
            ex.packets.append(p)
            if (p.type == PUBACK and ex.qos == 1) or (p.type == PUBCOMP and ex.qos == 2):
                ex.done = p.time
                done.append(open_.pop(p.packet_id))
    done += open_.values()
    rows = [e.row() for e in sorted(done, key=lambda e: (e.t_publish, e.seq if e.seq is not None else -1))]
    return pd.DataFrame(rows, columns=list(EXCHANGE_COLUMNS))


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
