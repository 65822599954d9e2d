"""An independent reader of TLS handshakes on the wire: pure Python, no tshark, no decryption.

It exists to check ``orchestrator.analysis.connections`` (which reads tshark's fields) on recorded
captures: the two must give the same connections, handshake classification and byte counts.

What it reads: classic pcap (micro- and nanosecond) and pcapng (section header, interface
description with if_tsresol, enhanced / simple / obsolete packet blocks); link types Ethernet
(with 802.1Q tags), Linux cooked v1 and v2, BSD loopback (null, loop) and raw IP; IPv4 (unfragmented)
and IPv6 (hop-by-hop, routing and destination option headers skipped); TCP. Each TCP connection to
the broker port is split into its two byte streams, reassembled by sequence number (a retransmitted,
duplicated or overlapping segment adds only the bytes not seen yet; reassembly stops at a gap). The
TLS records of each stream are walked and the plaintext handshake messages (everything before that
direction's first ChangeCipherSpec or application-data record) parsed: ClientHello (session ID,
offered cipher suites, extensions with their lengths), ServerHello (session ID, cipher suite, supported_versions,
pre_shared_key; a HelloRetryRequest is skipped), Certificate and NewSessionTicket.

The classification rules are those of the connections module's docstring, written here again on
purpose (the two implementations check each other). Byte counts: ``payload_*`` the distinct payload
bytes (sequence span of the data segments), ``retransmitted_*`` the payload bytes sent again,
``wire_*`` the original length of every frame.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import TestbedError

LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_LOOP, LINK_SLL, LINK_SLL2 = 0, 1, 101, 108, 113, 276
LINK_RAW_ALT = 12  # DLT_RAW on some BSDs
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
REC_CCS, REC_ALERT, REC_HANDSHAKE, REC_APPDATA = 20, 21, 22, 23
HS_CLIENT_HELLO, HS_SERVER_HELLO, HS_NEW_SESSION_TICKET, HS_CERTIFICATE = 1, 2, 4, 11
EXT_SUPPORTED_VERSIONS, EXT_SESSION_TICKET, EXT_PRE_SHARED_KEY = 43, 35, 41
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
VERSIONS = {0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}


@dataclass(frozen=True)
class CapturedFrame:
    time: float
    orig_len: int
    linktype: int
    data: bytes


@dataclass(frozen=True)
class Segment:
    time: float
    orig_len: int
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    flags: int
    payload_len: int  # from the IP length (what was sent), even when the capture cut the frame
    payload: bytes


# ---- capture files -------------------------------------------------------------------------------

def read_packets(path: Path) -> Iterator[CapturedFrame]:
    """Every packet record of a pcap or pcapng file, in file order."""
    data = path.read_bytes()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
        yield from _pcap_packets(data)
    elif magic == b"\x0a\x0d\x0d\x0a":
        yield from _pcapng_packets(data)
    else:
        raise TestbedError(f"{path} is not a pcap or pcapng file (magic {magic.hex()})")


def _pcap_packets(data: bytes) -> Iterator[CapturedFrame]:
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    scale = 1e-9 if data[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from(endian + "IIII", data, off)
        if off + 16 + incl > len(data):
            return
        yield CapturedFrame(sec + frac * scale, orig, linktype, data[off + 16:off + 16 + incl])
        off += 16 + incl


def _tsresol(options: bytes, endian: str) -> float:
    off = 0
    while off + 4 <= len(options):
        code, length = struct.unpack_from(endian + "HH", options, off)
        if code == 0:
            break
        if code == 9 and length >= 1:
            v = options[off + 4]
            return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
        off += 4 + length + (-length % 4)
    return 1e-6


def _pcapng_packets(data: bytes) -> Iterator[CapturedFrame]:
    endian, off = "<", 0
    interfaces: list[tuple[int, float]] = []  # (linktype, seconds per tick), per section
    while off + 12 <= len(data):
        if data[off:off + 4] == b"\x0a\x0d\x0d\x0a":
            endian = "<" if data[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            interfaces = []
        btype, blen = struct.unpack_from(endian + "II", data, off)
        if blen < 12 or off + blen > len(data):
            return
        body = data[off + 8:off + blen - 4]
        if btype == 1:  # interface description
            interfaces.append((struct.unpack_from(endian + "H", body, 0)[0], _tsresol(body[8:], endian)))
        elif btype in (2, 6):  # obsolete packet block, enhanced packet block
            if_id = struct.unpack_from(endian + ("HH" if btype == 2 else "I"), body, 0)[0]
            hi, lo, incl, orig = struct.unpack_from(endian + "IIII", body, 4)
            link, tick = interfaces[if_id]
            yield CapturedFrame(((hi << 32) | lo) * tick, orig, link, body[20:20 + incl])
        elif btype == 3:  # simple packet block: no timestamp, interface 0
            orig = struct.unpack_from(endian + "I", body, 0)[0]
            yield CapturedFrame(0.0, orig, interfaces[0][0], body[4:4 + orig])
        off += blen


# ---- link, IP, TCP -------------------------------------------------------------------------------

def _network(p: CapturedFrame) -> tuple[int, bytes] | None:
    """(ethertype, network-layer bytes) of a packet, or None for a link type or protocol we skip."""
    d, lt = p.data, p.linktype
    if lt == LINK_ETHERNET and len(d) >= 14:
        etype, off = struct.unpack_from("!H", d, 12)[0], 14
        while etype in (0x8100, 0x88A8) and len(d) >= off + 4:
            etype, off = struct.unpack_from("!H", d, off + 2)[0], off + 4
        return etype, d[off:]
    if lt == LINK_SLL and len(d) >= 16:
        return struct.unpack_from("!H", d, 14)[0], d[16:]
    if lt == LINK_SLL2 and len(d) >= 20:
        return struct.unpack_from("!H", d, 0)[0], d[20:]
    if lt in (LINK_NULL, LINK_LOOP) and len(d) >= 4:
        family = struct.unpack_from("!I" if lt == LINK_LOOP else "=I", d, 0)[0]
        if family > 0xFFFF:  # a capture written on a host of the other byte order
            family = int.from_bytes(d[:4], "little" if lt == LINK_LOOP else "big")
        return (0x0800 if family == 2 else 0x86DD), d[4:]
    if lt in (LINK_RAW, LINK_RAW_ALT) and d:
        return (0x0800 if d[0] >> 4 == 4 else 0x86DD), d
    return None


def _ipv6_addr(b: bytes) -> str:
    return str(ipaddress.IPv6Address(b))


def _transport(etype: int, ip: bytes) -> tuple[str, str, int, bytes] | None:
    """(src, dst, declared TCP segment length, TCP bytes) of a TCP packet."""
    if etype == 0x0800 and len(ip) >= 20 and ip[9] == 6:
        ihl, total = (ip[0] & 0x0F) * 4, struct.unpack_from("!H", ip, 2)[0]
        if struct.unpack_from("!H", ip, 6)[0] & 0x3FFF:  # a fragment
            return None
        return ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20])), total - ihl, ip[ihl:total]
    if etype == 0x86DD and len(ip) >= 40:
        nxt, off, plen = ip[6], 40, struct.unpack_from("!H", ip, 4)[0]
        while nxt in (0, 43, 60) and len(ip) >= off + 8:
            nxt, off = ip[off], off + 8 + ip[off + 1] * 8
        if nxt != 6:
            return None
        return _ipv6_addr(ip[8:24]), _ipv6_addr(ip[24:40]), 40 + plen - off, ip[off:40 + plen]
    return None


def segment(p: CapturedFrame) -> Segment | None:
    """The TCP segment of a packet, or None."""
    net = _network(p)
    tr = _transport(*net) if net else None
    if tr is None or len(tr[3]) < 20:
        return None
    src, dst, seg_len, tcp = tr
    sport, dport, seq = struct.unpack_from("!HHI", tcp, 0)
    hdr = (tcp[12] >> 4) * 4
    return Segment(p.time, p.orig_len, src, dst, sport, dport, seq, tcp[13], max(seg_len - hdr, 0), tcp[hdr:])


# ---- connections and streams ---------------------------------------------------------------------

@dataclass
class StreamDirection:
    """One direction of a connection: its segments, reassembled on demand."""

    isn: int | None = None
    segments: list[tuple[int, int, bytes]] = field(default_factory=list)  # (seq, declared len, bytes)
    wire: int = 0

    def _offsets(self) -> list[tuple[int, int, bytes]]:
        base = (self.isn + 1) if self.isn is not None else self.segments[0][0]
        out = []
        for seq, n, data in self.segments:
            off = (seq - base) % (1 << 32)
            out.append((off - (1 << 32) if off > (1 << 31) else off, n, data))
        return out

    def counts(self) -> tuple[int, int]:
        """(distinct payload bytes, bytes sent again)."""
        if not self.segments:
            return 0, 0
        offs = self._offsets()
        span = max(o + n for o, n, _ in offs) - min(o for o, _, _ in offs)
        return span, sum(n for _, n, _ in offs) - span

    def stream(self) -> bytes:
        """The byte stream from the first data byte up to the first gap."""
        if not self.segments:
            return b""
        offs = sorted(self._offsets(), key=lambda s: s[0])
        out, cur = bytearray(), offs[0][0]
        for off, _, data in offs:
            if off > cur:
                break
            if off + len(data) > cur:
                out += data[cur - off:]
                cur = off + len(data)
        return bytes(out)


@dataclass
class Connection:
    client: tuple[str, int]
    syn_time: float | None
    first_time: float
    up: StreamDirection = field(default_factory=StreamDirection)
    down: StreamDirection = field(default_factory=StreamDirection)
    tcp_end: str = "capture end"


def connections(path: Path, broker_port: int) -> list[Connection]:
    """The TCP connections to ``broker_port``, in order of their first packet (a new client SYN with
    another initial sequence number on the same addresses starts a new connection)."""
    current: dict[tuple[str, int, str], Connection] = {}
    out: list[Connection] = []
    for p in read_packets(path):
        s = segment(p)
        if s is None or broker_port not in (s.sport, s.dport):
            continue
        from_client = s.dport == broker_port
        key = (s.src, s.sport, s.dst) if from_client else (s.dst, s.dport, s.src)
        conn = current.get(key)
        is_syn = s.flags & (SYN | ACK) == SYN and from_client
        if conn is None or (is_syn and conn.up.isn not in (None, s.seq)):
            conn = Connection((key[0], key[1]), s.time if is_syn else None, s.time)
            current[key] = conn
            out.append(conn)
        side = conn.up if from_client else conn.down
        side.wire += s.orig_len
        if s.flags & SYN:
            side.isn = s.seq
        if s.payload_len:
            side.segments.append((s.seq, s.payload_len, s.payload))
        if s.flags & (FIN | RST) and conn.tcp_end == "capture end":
            conn.tcp_end = f"{'RST' if s.flags & RST else 'FIN'} {'client' if from_client else 'server'}"
    return out


# ---- TLS -----------------------------------------------------------------------------------------

@dataclass
class Hello:
    sid: bytes
    exts: dict[int, bytes]
    random: bytes = b""
    cipher: int | None = None
    legacy_version: int = 0
    suites: tuple[int, ...] = ()  # a ClientHello's offered cipher suites, in its order (SCSVs included)


@dataclass
class TlsSide:
    """What one direction's plaintext shows."""

    hellos: list[Hello] = field(default_factory=list)
    handshake_types: list[int] = field(default_factory=list)
    alerts_after_handshake: int = 0


def _extensions(b: bytes, off: int) -> dict[int, bytes]:
    exts: dict[int, bytes] = {}
    if off + 2 > len(b):
        return exts
    end = min(off + 2 + struct.unpack_from("!H", b, off)[0], len(b))
    off += 2
    while off + 4 <= end:
        etype, elen = struct.unpack_from("!HH", b, off)
        exts.setdefault(etype, b[off + 4:off + 4 + elen])
        off += 4 + elen
    return exts


def parse_hello(msg_type: int, b: bytes) -> Hello:
    """A ClientHello or ServerHello body."""
    random, n = b[2:34], b[34]
    sid, off = b[35:35 + n], 35 + n
    if msg_type == HS_CLIENT_HELLO:
        n = struct.unpack_from("!H", b, off)[0]
        suites = tuple(int.from_bytes(b[i:i + 2], "big") for i in range(off + 2, min(off + 2 + n, len(b) - 1), 2))
        off += 2 + n
        off += 1 + b[off]
        return Hello(sid, _extensions(b, off), random, suites=suites)
    cipher = struct.unpack_from("!H", b, off)[0]
    return Hello(sid, _extensions(b, off + 3), random, cipher, struct.unpack_from("!H", b, 0)[0])


def tls_side(stream: bytes) -> TlsSide:
    """Walk the records of one direction; parse the handshake messages before its first CCS / app data."""
    side, hs, off, plaintext = TlsSide(), bytearray(), 0, True
    while off + 5 <= len(stream):
        ctype, length = stream[off], struct.unpack_from("!H", stream, off + 3)[0]
        if off + 5 + length > len(stream):
            break
        if ctype in (REC_CCS, REC_APPDATA):
            plaintext = False
        elif ctype == REC_HANDSHAKE and plaintext:
            hs += stream[off + 5:off + 5 + length]
        elif ctype == REC_ALERT and not plaintext:
            side.alerts_after_handshake += 1
        off += 5 + length
    off = 0
    while off + 4 <= len(hs):
        mtype, mlen = hs[off], int.from_bytes(hs[off + 1:off + 4], "big")
        body = bytes(hs[off + 4:off + 4 + mlen])
        if len(body) < mlen:
            break
        side.handshake_types.append(mtype)
        if mtype in (HS_CLIENT_HELLO, HS_SERVER_HELLO):
            hello = parse_hello(mtype, body)
            if hello.random != HRR_RANDOM:
                side.hellos.append(hello)
        off += 4 + mlen
    return side


def classify_connection(client: TlsSide, server: TlsSide) -> tuple[str | None, int | None, str, str]:
    """(version, cipher suite, kind, evidence) of a TLS connection's two plaintext sides."""
    if not client.hellos or not server.hellos:
        missing = "ClientHello" if not client.hellos else "ServerHello"
        return None, None, "unknown", f"no {missing} on the wire"
    ch, sh = client.hellos[0], server.hellos[0]
    sv = sh.exts.get(EXT_SUPPORTED_VERSIONS)
    code = struct.unpack("!H", sv[:2])[0] if sv and len(sv) >= 2 else sh.legacy_version
    version = VERSIONS.get(code, f"0x{code:04x}")
    if version == "TLS 1.3":
        if EXT_PRE_SHARED_KEY in sh.exts:
            return version, sh.cipher, "resumed-psk", "TLS 1.3 ServerHello carries pre_shared_key (41)"
        return version, sh.cipher, "full", "TLS 1.3 ServerHello without pre_shared_key (41)"
    if HS_CERTIFICATE in server.handshake_types:
        return version, sh.cipher, "full", "server sent a Certificate"
    ticket = len(ch.exts.get(EXT_SESSION_TICKET, b""))
    if ticket:
        return version, sh.cipher, "resumed-ticket", f"no Certificate; ClientHello session_ticket carried {ticket} B"
    if ch.sid and sh.sid == ch.sid:
        said = f"no Certificate; ServerHello echoes the {len(ch.sid)} B session ID offered"
        return version, sh.cipher, "resumed-id", said
    return version, sh.cipher, "unknown", "no Certificate, but neither a ticket offered nor the session ID echoed"


@dataclass(frozen=True)
class WireConnection:
    """One row of the independent table."""

    client: str
    client_port: int
    syn_time: float | None
    tls_version: str | None
    cipher_suite_id: str | None
    handshake: str
    evidence: str
    payload_client_to_server: int
    payload_server_to_client: int
    retransmitted_client_to_server: int
    retransmitted_server_to_client: int
    wire_client_to_server: int
    wire_server_to_client: int
    tcp_end: str
    alerts_client: int  # alert records after the handshake (encrypted in TLS 1.2; hidden in TLS 1.3)
    alerts_server: int
    server_tickets: int  # NewSessionTicket messages in plaintext (TLS 1.2)


def wire_connections(path: Path, broker_port: int, tls: bool) -> list[WireConnection]:
    """The per-connection classification and byte counts of ``path``, read from the bytes alone."""
    rows = []
    for conn in connections(path, broker_port):
        up, down = conn.up.counts(), conn.down.counts()
        if tls:
            cs, ss = tls_side(conn.up.stream()), tls_side(conn.down.stream())
            version, cipher, kind, evidence = classify_connection(cs, ss)
        else:
            cs = ss = TlsSide()
            version, cipher, kind, evidence = None, None, "none", "plain MQTT port"
        rows.append(WireConnection(
            f"{conn.client[0]}:{conn.client[1]}", conn.client[1], conn.syn_time, version,
            f"0x{cipher:04x}" if cipher is not None else None, kind, evidence, up[0], down[0], up[1], down[1],
            conn.up.wire, conn.down.wire, conn.tcp_end, cs.alerts_after_handshake, ss.alerts_after_handshake,
            ss.handshake_types.count(HS_NEW_SESSION_TICKET)))
    return rows
