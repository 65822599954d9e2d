"""A capture export, as analysis asks for it and a backend does it: the fields, the request, the outcome.

The exported text has one line per frame, the fields in the order of :data:`FIELDS` separated by a
tab, no header, no quoting, and EVERY occurrence of a field in the frame joined with
:data:`AGGREGATOR`, because several MQTT messages (and TLS records) can share one TCP segment.
A :class:`FieldExporter` does the export (``backends/tshark.py`` runs tshark); analysis is handed one
and parses the text (``analysis/fields.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.errors import ToolError

AGGREGATOR = "|"

# (column, tshark field). Order = output column order.
FIELDS: tuple[tuple[str, str], ...] = (
    ("frame", "frame.number"),
    ("time", "frame.time_epoch"),
    ("frame_len", "frame.len"),
    ("ip_src", "ip.src"),
    ("ip_dst", "ip.dst"),
    ("ipv6_src", "ipv6.src"),
    ("ipv6_dst", "ipv6.dst"),
    ("ip_hdr_len", "ip.hdr_len"),
    ("stream", "tcp.stream"),
    ("src_port", "tcp.srcport"),
    ("dst_port", "tcp.dstport"),
    ("tcp_hdr_len", "tcp.hdr_len"),
    ("tcp_len", "tcp.len"),
    ("tcp_seq", "tcp.seq"),
    ("tcp_ack", "tcp.ack"),
    ("sack_le", "tcp.options.sack_le"),
    ("sack_re", "tcp.options.sack_re"),
    ("tcp_flags", "tcp.flags"),
    ("retrans", "tcp.analysis.retransmission"),
    ("fast_retrans", "tcp.analysis.fast_retransmission"),
    ("tls_ctype", "tls.record.content_type"),
    ("tls_opaque", "tls.record.opaque_type"),
    ("tls_rec_len", "tls.record.length"),
    ("tls_hs_type", "tls.handshake.type"),
    ("tls_cipher", "tls.handshake.ciphersuite"),
    ("tls_sup_ver", "tls.handshake.extensions.supported_version"),
    ("tls_hs_ver", "tls.handshake.version"),
    ("mqtt_type", "mqtt.msgtype"),
    ("mqtt_len", "mqtt.len"),
    ("mqtt_msg", "mqtt.msg"),
    ("mqtt_hdrflags", "mqtt.hdrflags"),  # type, DUP and QoS of each MQTT packet (analysis/exchange.py)
    ("mqtt_msgid", "mqtt.msgid"),  # the packet ids of QoS 1/2 PUBLISH and of the acknowledgements
    # MQTT over WebSocket: each frame's 7-bit length field (126, 127: a 16-, 64-bit length follows) and mask bit,
    # which give its header's size (analysis/messages.py ws_header_lengths); empty for MQTT on TCP
    ("ws_len7", "websocket.payload_length"),
    ("ws_mask", "websocket.mask"),
)
FIELD_NAMES: tuple[str, ...] = tuple(name for _, name in FIELDS)

@dataclass(frozen=True)
class ExportRequest:
    """One export pass: the capture, where MQTT is (port, TLS or not, inside WebSocket frames or not), the key logs
    that decrypt it."""

    pcap: Path
    broker_port: int
    tls: bool
    keylogs: tuple[Path, ...] = ()
    fields: tuple[str, ...] = FIELD_NAMES
    aggregator: str = AGGREGATOR
    websocket: bool = False


@dataclass
class ExportOutcome:
    """How the exporting program ended; its exit code is for the caller to judge."""

    argv: list[str]
    returncode: int
    stderr: str

    def error(self, pcap: Path) -> ToolError:
        """The error to raise when the export failed."""
        return ToolError([str(a) for a in self.argv], self.returncode, "", self.stderr,
                         message=f"tshark could not read {pcap} (exit {self.returncode})")


class FieldExporter(Protocol):
    """Runs the export pass of ``request`` and gives its text to ``handle`` in whole-line chunks.

    A missing program is a TestbedError and a timeout a ToolError; a non-zero exit is returned in
    the outcome (a truncated capture exits non-zero after printing every complete packet).
    """

    def __call__(self, request: ExportRequest, handle: Callable[[str], None], /) -> ExportOutcome: ...
