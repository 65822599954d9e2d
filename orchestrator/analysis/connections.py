"""Per-connection table of a capture: one row per TCP connection to the broker port, each TLS handshake
classified full or resumed FROM WHAT IS ON THE WIRE (issue 13, part 2).

This module asks its exporter for its OWN field list (:data:`CONNECTION_FIELDS`, not the run export's
``orchestrator.model.export.FIELDS``) and parses the text itself. ``orchestrator.analysis.tlswire``
reads the capture file without tshark and must agree with it (tests/unit/analysis/test_connections.py).

Classification (the first ClientHello and the first ServerHello of the connection):

- plain MQTT (``tls`` false): ``none``.
- TLS 1.3 (the ServerHello's supported_versions says 0x0304): ``resumed-psk`` when the ServerHello
  carries the pre_shared_key extension (type 41), the server accepting one of the client's PSKs;
  otherwise ``full``. The Certificate is encrypted in TLS 1.3, so its absence is not looked at.
- TLS 1.2: ``full`` when the server sent a Certificate message. Without one the handshake is
  abbreviated, i.e. resumed: ``resumed-ticket`` when the ClientHello's session_ticket extension
  (type 35) carried data (RFC 5077: the server may then echo the client's session ID too, so an
  echoed ID does not make it an ID resumption); else ``resumed-id`` when the ServerHello echoes the
  non-empty session ID the ClientHello offered. No Certificate and neither of those: ``unknown``.
- No ClientHello or no ServerHello on the wire (capture started late, connection refused): ``unknown``.

The ``evidence`` column says which of these facts decided.

Other columns, at the capture point (connection times as ``analysis/handshake.py`` defines them):
``syn_time`` (first client SYN, epoch seconds); ``tcp_connect_ms`` SYN -> the client's ACK of the
SYN/ACK; ``tls_handshake_ms`` ClientHello -> the later of both Finished (decrypted; TLS 1.2 without
keys: the first handshake record after each side's ChangeCipherSpec); ``handshake_round_trips`` the
times the client waited for the server between its ClientHello and the flight that may carry its first
application data, counted from TLS records without keys (``analysis/handshake_flights.py``): a flight is a
run of record-bearing frames of one side, and each client flight that follows a server flight is one round
trip, up to and including the client's flight with its first application-data record (TLS 1.2) or its
first encrypted record, the Finished (TLS 1.3). TLS 1.2 full = 2, TLS 1.2 resumed = 1, TLS 1.3 full or
PSK = 1, a HelloRetryRequest one more; None for plain MQTT or a handshake that never got that far;
``mqtt_connect_ms`` CONNECT -> CONNACK; ``client_id`` the MQTT client id its CONNECT carried
(decrypted or plain; None when not readable): whose connection it is, so a fleet's connections are told apart by device;
``syn_to_first_publish_ms`` first SYN -> the client's first PUBLISH; per direction
``payload_*`` = distinct TCP payload bytes (the sequence span of the data segments, so a retransmitted
or duplicated segment is counted once), ``retransmitted_*`` = the payload bytes sent again on top,
``wire_*`` = frame bytes (all headers) of every captured frame, retransmissions included.
``split_span_ms`` first SYN -> CONNACK, and its parts ``split_device_ms``, ``split_broker_ms`` and
``split_network_ms`` (they add up to it), ``split_rtt_ms`` TCP's round trip they use and ``split_turns`` the times
the device answered the broker (``analysis/handshake_split.py``, no keys needed);
``connack_time`` the broker's CONNACK and ``end_time`` the first FIN or RST (epoch seconds; None when not seen):
when the connection was up (the events' timeline, analysis/events.py).
How it ended: ``tcp_end`` the first FIN or RST (``FIN client``, ``RST server``, ...) or ``capture end``;
``disconnect_seen`` an MQTT DISCONNECT from the client; ``close_notify_client`` / ``_server`` a
decrypted close_notify alert; ``alerts_client`` / ``_server`` every decrypted alert by name;
``alert_records_*`` the alert records tshark saw (in TLS 1.3 only when decrypted, the outer type
being application data). Without keys disconnect and close_notify are None and ``end_evidence``
says whether an encrypted alert record was seen: NOT necessarily close_notify, since OpenSSL 3
answers a peer's EOF without close_notify with a fatal decode_error alert (recorded in
tests/fixtures/connections/t12_session_id.pcapng).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.analysis.fields import AGGREGATOR, ExportRequest, FieldExporter
from orchestrator.analysis.handshake_flights import round_trips
from orchestrator.analysis.handshake_split import connack_without_keys, split
from orchestrator.analysis.pcapfile import scan_capture

# (column, tshark field). Order = output column order.
CONNECTION_FIELDS: tuple[tuple[str, str], ...] = (
    ("frame", "frame.number"),
    ("time", "frame.time_epoch"),
    ("frame_len", "frame.len"),
    ("ip_src", "ip.src"),
    ("ipv6_src", "ipv6.src"),
    ("stream", "tcp.stream"),
    ("src_port", "tcp.srcport"),
    ("dst_port", "tcp.dstport"),
    ("seq_raw", "tcp.seq_raw"),
    ("tcp_len", "tcp.len"),
    ("tcp_flags", "tcp.flags"),
    ("ctype", "tls.record.content_type"),
    ("otype", "tls.record.opaque_type"),
    ("hs_type", "tls.handshake.type"),
    ("hs_ver", "tls.handshake.version"),
    ("sup_ver", "tls.handshake.extensions.supported_version"),
    ("cipher", "tls.handshake.ciphersuite"),
    ("sid", "tls.handshake.session_id"),
    ("ext_type", "tls.handshake.extension.type"),
    ("ext_len", "tls.handshake.extension.len"),
    ("alert", "tls.alert_message.desc"),
    ("mqtt_type", "mqtt.msgtype"),
    ("mqtt_client_id", "mqtt.clientid"),
)
COLUMNS = tuple(c for c, _ in CONNECTION_FIELDS)
NUMERIC = ("frame", "time", "frame_len", "stream", "src_port", "dst_port", "seq_raw", "tcp_len")
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
EXT_SESSION_TICKET, EXT_PRE_SHARED_KEY = 35, 41
HS_CLIENT_HELLO, HS_SERVER_HELLO, HS_CERTIFICATE, HS_FINISHED = 1, 2, 11, 20
CT_CCS, CT_ALERT, CT_HANDSHAKE = 20, 21, 22
MQTT_CONNECT, MQTT_CONNACK, MQTT_PUBLISH, MQTT_DISCONNECT = 1, 2, 3, 14
ALERTS = {0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac", 40: "handshake_failure",
          42: "bad_certificate", 48: "unknown_ca", 50: "decode_error", 51: "decrypt_error", 70: "protocol_version",
          80: "internal_error", 90: "user_canceled", 109: "missing_extension", 116: "certificate_required"}
PLAIN = {"tls_version": None, "cipher_suite_id": None, "handshake": "none", "evidence": "plain MQTT port",
         "tls_handshake_ms": None, "tls_finished_from": None, "decrypted": True}
TLS_VERSIONS = {0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}


def _items(cell: str) -> list[str]:
    return [v for v in cell.split(AGGREGATOR) if v] if cell else []


def _ints(cell: str) -> list[int]:
    return [int(v, 0) for v in _items(cell)]


def parse_connection_fields(text: str) -> pd.DataFrame:
    """The exported text of :data:`CONNECTION_FIELDS` -> per-frame table (list cells stay strings)."""
    if not text.strip():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    df = pd.read_csv(io.StringIO(text), sep="\t", header=None, names=list(COLUMNS), dtype=object,
                     keep_default_na=False, na_filter=False, quoting=3, engine="c")
    for col in NUMERIC:  # a field repeated in a frame (ICMP quoting TCP): keep its first value
        df[col] = pd.to_numeric(df[col].str.split(AGGREGATOR, regex=False).str[0], errors="coerce")
    df["tcp_flags"] = [int(v.split(AGGREGATOR)[0], 16) if v else 0 for v in df["tcp_flags"]]
    return df[df["stream"].notna()].reset_index(drop=True)


def classify(version: str | None, ch: dict[str, Any] | None, sh: dict[str, Any] | None,
             certificate: bool) -> tuple[str, str]:
    """(kind, evidence) by the rules of the module docstring. ``ch``: {"sid", "exts": {type: len}};
    ``sh``: {"sid", "exts"}; ``certificate``: the server sent a Certificate message (TLS 1.2)."""
    if ch is None or sh is None:
        return "unknown", "no ClientHello on the wire" if ch is None else "no ServerHello on the wire"
    if version == "TLS 1.3":
        if EXT_PRE_SHARED_KEY in sh["exts"]:
            return "resumed-psk", "TLS 1.3 ServerHello carries pre_shared_key (41)"
        return "full", "TLS 1.3 ServerHello without pre_shared_key (41)"
    if certificate:
        return "full", "server sent a Certificate"
    ticket = ch["exts"].get(EXT_SESSION_TICKET, 0)
    if ticket > 0:
        return "resumed-ticket", f"no Certificate; ClientHello session_ticket carried {ticket} B"
    if ch["sid"] and sh["sid"] == ch["sid"]:
        return "resumed-id", f"no Certificate; ServerHello echoes the {len(ch['sid']) // 2} B session ID offered"
    return "unknown", "no Certificate, but neither a ticket offered nor the session ID echoed"


def _hello(row: pd.Series) -> dict[str, Any]:
    types, lens = _ints(row["ext_type"]), _ints(row["ext_len"])
    exts = dict(zip(types, lens, strict=False)) if len(types) == len(lens) else dict.fromkeys(types, 0)
    sid = row["sid"].split(AGGREGATOR)[0].replace(":", "") if row["sid"] else ""
    return {"sid": sid, "exts": exts}


def _version(sh: pd.Series) -> str | None:
    codes = _ints(sh["sup_ver"]) or _ints(sh["hs_ver"])
    return TLS_VERSIONS.get(codes[0], f"0x{codes[0]:04x}") if codes else None


def _first_with(rows: pd.DataFrame, col: str, value: int) -> pd.Series | None:
    for _, row in rows[(rows[col] != "").to_numpy()].iterrows():
        if value in _ints(row[col]):
            return row
    return None


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else (end - start) * 1000.0


def _t(row: pd.Series | None) -> float | None:
    return None if row is None else float(row["time"])


def _after_ccs(rows: pd.DataFrame) -> float | None:
    """TLS 1.2 without keys: time of the first handshake record after a ChangeCipherSpec."""
    seen = False
    for _, row in rows[(rows["ctype"] != "").to_numpy()].iterrows():
        for c in _ints(row["ctype"]):
            if c == CT_CCS:
                seen = True
            elif c == CT_HANDSHAKE and seen:
                return float(row["time"])
    return None


def _tls_figures(c: pd.DataFrame, s: pd.DataFrame) -> dict[str, Any]:
    ch, sh = _first_with(c, "hs_type", HS_CLIENT_HELLO), _first_with(s, "hs_type", HS_SERVER_HELLO)
    version = _version(sh) if sh is not None else None
    cert = _first_with(s, "hs_type", HS_CERTIFICATE) is not None
    kind, evidence = classify(version, None if ch is None else _hello(ch), None if sh is None else _hello(sh), cert)
    c_fin, s_fin = _t(_first_with(c, "hs_type", HS_FINISHED)), _t(_first_with(s, "hs_type", HS_FINISHED))
    decrypted = c_fin is not None and s_fin is not None
    if not decrypted and version == "TLS 1.2":
        c_fin, s_fin = _after_ccs(c), _after_ccs(s)
    end = max(c_fin, s_fin) if c_fin is not None and s_fin is not None else None
    suites = _items(sh["cipher"]) if sh is not None else []
    return {"tls_version": version, "cipher_suite_id": f"0x{int(suites[0], 16):04x}" if suites else None,
            "handshake": kind, "evidence": evidence, "tls_handshake_ms": _ms(_t(ch), end) if ch is not None else None,
            "tls_finished_from": None if end is None else
            ("decrypted Finished" if decrypted else "first record after ChangeCipherSpec (no keys)"),
            "decrypted": decrypted}


def _payload(rows: pd.DataFrame) -> tuple[int, int]:
    """(distinct payload bytes = sequence span of the data segments, bytes sent again on top)."""
    data = rows[rows["tcp_len"].to_numpy() > 0]
    if data.empty:
        return 0, 0
    seq = data["seq_raw"].to_numpy(dtype=np.int64)
    start = (seq - seq[0]) % (1 << 32)  # offsets from the first data segment, modulo wrap
    start = np.where(start > (1 << 31), start - (1 << 32), start)
    ends = start + data["tcp_len"].to_numpy(dtype=np.int64)
    span = int(ends.max() - start.min())
    return span, int(data["tcp_len"].sum()) - span


def _tcp_end(pk: pd.DataFrame, from_client: np.ndarray) -> str:
    flags = pk["tcp_flags"].to_numpy()
    for f, client in zip(flags, from_client, strict=True):
        if f & (FIN | RST):
            return f"{'RST' if f & RST else 'FIN'} {'client' if client else 'server'}"
    return "capture end"


def _end_time(pk: pd.DataFrame) -> float | None:
    """When the connection ended on the wire: its first FIN or RST (None: open at the capture's end)."""
    ended = pk[(pk["tcp_flags"].to_numpy() & (FIN | RST)) != 0]
    return _t(ended.iloc[0]) if len(ended) else None


def _alerts(rows: pd.DataFrame) -> str:
    """The decrypted alert descriptions of one side, in order ("close_notify", "decode_error", ...)."""
    return ",".join(ALERTS.get(a, str(a)) for v in rows["alert"] for a in _ints(v))


def _ending(c: pd.DataFrame, s: pd.DataFrame, tls: bool, decrypted: bool, version: str | None) -> dict[str, Any]:
    disconnect = _first_with(c, "mqtt_type", MQTT_DISCONNECT) is not None
    records = [sum(_ints(v).count(CT_ALERT) for v in side["ctype"]) for side in (c, s)]
    out: dict[str, Any] = {"disconnect_seen": disconnect, "close_notify_client": None, "close_notify_server": None,
                           "alerts_client": "", "alerts_server": "", "alert_records_client": records[0],
                           "alert_records_server": records[1], "end_evidence": "plain: no TLS alerts"}
    if not tls:
        return out
    if decrypted:
        names = [_alerts(side) for side in (c, s)]
        out.update(close_notify_client="close_notify" in names[0], close_notify_server="close_notify" in names[1],
                   alerts_client=names[0], alerts_server=names[1], end_evidence="decrypted")
        return out
    seen = [side for side, n in zip(("client", "server"), records, strict=True) if n]
    said = (f"alert record from {' and '.join(seen)}: close_notify after a clean close, but OpenSSL 3 "
            "answers an EOF without close_notify with a fatal alert too") if seen else "no alert record"
    if version == "TLS 1.3":
        said = "TLS 1.3 hides alerts in application-data records"
    out.update(disconnect_seen=None, end_evidence=f"not decrypted; {said}")
    return out


def connection_row(pk: pd.DataFrame, broker_port: int, tls: bool) -> dict[str, Any]:
    """The table row of one TCP stream (``pk``: its frames in capture order)."""
    from_client = (pk["dst_port"] == broker_port).to_numpy()
    c, s = pk[from_client], pk[~from_client]
    flags = pk["tcp_flags"].to_numpy()
    syn = pk[from_client & ((flags & (SYN | ACK)) == SYN)]
    synack = pk[~from_client & ((flags & (SYN | ACK)) == (SYN | ACK))]
    syn_t = _t(syn.iloc[0]) if len(syn) else None
    ack_t = None
    if len(synack):
        acks = c[((c["tcp_flags"].to_numpy() & (SYN | ACK)) == ACK) & (c["time"] >= synack["time"].iloc[0]).to_numpy()]
        ack_t = _t(acks.iloc[0]) if len(acks) else None
    tls_part: dict[str, Any] = _tls_figures(c, s) if tls else dict(PLAIN)
    connect = _first_with(c, "mqtt_type", MQTT_CONNECT)
    connect_t = _t(connect)
    client_id = str(connect["mqtt_client_id"]).split(AGGREGATOR)[0] if connect is not None else ""
    publish_t = _t(_first_with(c, "mqtt_type", MQTT_PUBLISH))
    connack = _first_with(s, "mqtt_type", MQTT_CONNACK)
    (up, up_re), (down, down_re) = _payload(c), _payload(s)
    ip = (c["ip_src"].iloc[0] or c["ipv6_src"].iloc[0]) if len(c) else None
    port = int(c["src_port"].iloc[0]) if len(c) else (int(s["dst_port"].iloc[0]) if len(s) else None)
    decrypted = tls_part.pop("decrypted")
    ending = _ending(c, s, tls, decrypted, tls_part["tls_version"])
    return {
        "stream": int(pk["stream"].iloc[0]), "client": f"{ip}:{port}", "client_ip": ip, "client_port": port,
        "syn_time": syn_t, "tcp_connect_ms": _ms(syn_t, ack_t), **tls_part,
        "handshake_round_trips": round_trips(pk, from_client, tls_part["tls_version"]) if tls else None,
        "client_id": client_id or None,
        "mqtt_connect_ms": _ms(connect_t, _t(connack)),
        "syn_to_first_publish_ms": _ms(syn_t, publish_t),
        "payload_client_to_server": up, "payload_server_to_client": down,
        "retransmitted_client_to_server": up_re, "retransmitted_server_to_client": down_re,
        "wire_client_to_server": int(c["frame_len"].sum()), "wire_server_to_client": int(s["frame_len"].sum()),
        "tcp_end": _tcp_end(pk, from_client), **ending,
        "connack_time": _t(connack), "end_time": _end_time(pk),
        **_split(pk, from_client, connack, tls_part["tls_version"]),
    }


def _split(pk: pd.DataFrame, from_client: np.ndarray, connack: pd.Series | None, version: str | None
           ) -> dict[str, Any]:
    """The handshake split up to the CONNACK (TLS 1.2 without keys: the broker's first application record)."""
    if connack is not None:
        return split(pk, from_client, int(pk.index.get_loc(connack.name)))
    if version == "TLS 1.2":
        return split(pk, from_client, connack_without_keys(pk, from_client),
                     "the broker's first application-data record after the client's (no keys)")
    return split(pk, from_client, None)


def connections_from_frames(frames: pd.DataFrame, broker_port: int, tls: bool) -> pd.DataFrame:
    """One row per TCP stream touching ``broker_port``, in stream order."""
    on_port = frames[((frames["dst_port"] == broker_port) | (frames["src_port"] == broker_port)).to_numpy()]
    rows = [connection_row(pk, broker_port, tls) for _, pk in on_port.groupby("stream", sort=True)]
    return pd.DataFrame(rows)


def connection_frames(pcap: Path, broker_port: int, tls: bool, keylogs: tuple[Path, ...] | list[Path],
                      exporter: FieldExporter, *, websocket: bool = False) -> pd.DataFrame:
    """The per-frame table of ``pcap`` that :func:`connections_from_frames` reads, exported by ``exporter``."""
    request = ExportRequest(pcap, broker_port, tls, tuple(keylogs), fields=tuple(f for _, f in CONNECTION_FIELDS),
                            websocket=websocket)
    chunks: list[str] = []
    handle: Callable[[str], None] = chunks.append
    outcome = exporter(request, handle)
    if outcome.returncode != 0 and not scan_capture(pcap).truncated_bytes:
        raise outcome.error(pcap)
    return parse_connection_fields("".join(chunks))


def connections_table(pcap: Path, broker_port: int, tls: bool, keylogs: tuple[Path, ...] | list[Path],
                      exporter: FieldExporter, *, websocket: bool = False) -> pd.DataFrame:
    """Per-connection table of ``pcap`` (columns: the module docstring), exported by ``exporter``."""
    return connections_from_frames(connection_frames(pcap, broker_port, tls, keylogs, exporter, websocket=websocket),
                                   broker_port, tls)
