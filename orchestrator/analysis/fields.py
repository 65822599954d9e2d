"""The exported fields of a capture: what analysis asks for, the exporter it is handed, the parser.

Analysis never starts a program: it is handed a :class:`FieldExporter` (``backends/tshark.py``
runs tshark) and reads the text it gives back. The text format is one line per frame, the fields
in the order of :data:`FIELDS` separated by a tab, no header, no quoting, and EVERY occurrence of a
field in the frame joined with :data:`AGGREGATOR`, because several MQTT messages (and TLS records)
can share one TCP segment.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd

from orchestrator.errors import TestbedError, ToolError

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
)
FIELD_NAMES: tuple[str, ...] = tuple(name for _, name in FIELDS)
NUMERIC = ("frame", "time", "frame_len", "ip_hdr_len", "stream", "src_port", "dst_port", "tcp_hdr_len",
           "tcp_len", "tcp_seq")


@dataclass(frozen=True)
class ExportRequest:
    """One export pass: the capture, where MQTT is (port, TLS or not), the key logs that decrypt it."""

    pcap: Path
    broker_port: int
    tls: bool
    keylogs: tuple[Path, ...] = ()
    fields: tuple[str, ...] = FIELD_NAMES
    aggregator: str = AGGREGATOR


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


def _empty_table(names: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64" if c in NUMERIC else object) for c in names})


def _read_table(text: str, names: list[str]) -> pd.DataFrame:
    dtypes: dict[str, object] = {c: object for c in names}
    dtypes.update({c: "float64" for c in NUMERIC})
    dtypes.update({"frame": "int64", "frame_len": "int64"})
    common = dict(sep="\t", header=None, names=names, keep_default_na=False, quoting=3, engine="c")
    try:
        return pd.read_csv(io.StringIO(text), dtype=dtypes, na_values={c: [""] for c in NUMERIC}, **common)
    except ValueError:
        # a numeric field repeated in some frame (e.g. ICMP quoting a TCP header): keep its first value
        df = pd.read_csv(io.StringIO(text), dtype=object, na_filter=False, **common)
        for col in NUMERIC:
            first = df[col].str.split(AGGREGATOR, regex=False).str[0]
            df[col] = pd.to_numeric(first, errors="coerce")
        df["frame"] = df["frame"].astype("int64")
        df["frame_len"] = df["frame_len"].astype("int64")
        return df


def parse_fields(text: str) -> pd.DataFrame:
    """The exported text -> per-packet DataFrame (multi-valued columns stay strings)."""
    names = [c for c, _ in FIELDS]
    if not text.strip():
        return _empty_table(names)
    first = text[:text.find("\n")] if "\n" in text else text
    if first.count("\t") != len(names) - 1:
        raise TestbedError(f"tshark printed {first.count(chr(9)) + 1} columns, expected {len(names)}",
                           evidence=first[:300])
    df = _read_table(text, names)
    flags = df["tcp_flags"]
    table = {v: (int(v.split(AGGREGATOR)[0], 16) if v else -1) for v in flags.unique()}
    df["tcp_flags"] = flags.map(table).astype("int64")
    df["retrans"] = (df["retrans"] != "") | (df["fast_retrans"] != "")
    df["fast_retrans"] = df["fast_retrans"] != ""
    return df
