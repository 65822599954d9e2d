"""ONE tshark pass over a capture -> the per-packet table (pandas).

``-T fields -E occurrence=a``: every occurrence of a field in a frame, joined with ``|``, because
several MQTT messages (and TLS records) can share one TCP segment. Key logs are merged into one
temporary file for ``-o tls.keylog_file:``; non-standard ports get decode-as rules.
"""

from __future__ import annotations

import io
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pandas as pd

from orchestrator.backends.process import run
from orchestrator.errors import TestbedError, ToolError

AGGREGATOR = "|"
MQTT_PORT = 1883
MQTTS_PORT = 8883

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
NUMERIC = ("frame", "time", "frame_len", "ip_hdr_len", "stream", "src_port", "dst_port", "tcp_hdr_len",
           "tcp_len", "tcp_seq")
# Preferences pinned so a user's Wireshark profile cannot change what we read.
PREFERENCES: tuple[str, ...] = (
    "tcp.desegment_tcp_streams:TRUE",
    "tcp.analyze_sequence_numbers:TRUE",
    # a retransmission that fills a gap (the original was lost before the capture point) carries
    # messages seen nowhere else: without this tshark leaves them undissected
    "tcp.reassemble_out_of_order:TRUE",
    "tls.desegment_ssl_records:TRUE",
    "tls.desegment_ssl_application_data:TRUE",
    "mqtt.show_msg_as_text:FALSE",
)


def decode_as_args(broker_port: int, tls: bool) -> list[str]:
    """Decode-as rules for a broker on a non-standard port (none for 1883 plain / 8883 TLS)."""
    if tls and broker_port != MQTTS_PORT:
        return ["-d", f"tcp.port=={broker_port},tls", "-d", f"tls.port=={broker_port},mqtt"]
    if not tls and broker_port != MQTT_PORT:
        return ["-d", f"tcp.port=={broker_port},mqtt"]
    return []


def fields_argv(pcap: Path, *, broker_port: int, tls: bool, keylog: Path | None,
                tshark: str = "tshark") -> list[str]:
    """The tshark command line of the one export pass."""
    argv = [tshark, "-n", "-r", str(pcap), "-T", "fields", "-E", "header=n", "-E", "separator=/t",
            "-E", "occurrence=a", "-E", f"aggregator={AGGREGATOR}", "-E", "quote=n"]
    for pref in PREFERENCES:
        argv += ["-o", pref]
    if keylog is not None:
        argv += ["-o", f"tls.keylog_file:{keylog}"]
    argv += decode_as_args(broker_port, tls)
    for _, name in FIELDS:
        argv += ["-e", name]
    return argv


@contextmanager
def merged_keylog(paths: Sequence[Path]) -> Iterator[Path | None]:
    """Merge NSS key logs into one temporary file (duplicates removed); None when there are none."""
    if not paths:
        yield None
        return
    seen: set[str] = set()
    lines: list[str] = []
    for p in paths:
        try:
            text = p.read_text(encoding="ascii", errors="replace")
        except OSError as exc:
            raise TestbedError(f"cannot read key log {p}: {exc.strerror}") from exc
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and line not in seen:
                seen.add(line)
                lines.append(line)
    fd, name = tempfile.mkstemp(prefix="testbed-keylog-", suffix=".log")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write("\n".join(lines) + "\n")
        yield Path(name)
    finally:
        os.unlink(name)


@dataclass
class ExportOutcome:
    argv: list[str]
    returncode: int
    stderr: str


def export_chunks(pcap: Path, handle: Callable[[str], None], *, broker_port: int, tls: bool,
                  keylogs: Sequence[Path] = (), timeout: float = 1800.0,
                  chunk_bytes: int = 4 << 20) -> ExportOutcome:
    """Run the export pass and give its output to ``handle`` in whole-line chunks WHILE tshark runs.

    ``backends.run.run`` buffers a program's whole output; here parsing overlaps tshark's own work
    (tshark uses one core, parsing the other), which is what keeps the analysis close to a bare
    export. A reader thread drains the pipe so tshark never waits on us. Same error semantics as
    ``run``: a missing program is a TestbedError, a timeout a ToolError; the exit code is returned
    for the caller to judge (a truncated capture exits 2 after printing every complete packet).
    """
    with merged_keylog(keylogs) as keylog:
        argv = fields_argv(pcap, broker_port=broker_port, tls=tls, keylog=keylog)
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
            except FileNotFoundError as exc:
                raise TestbedError(f"program not found: {argv[0]}",
                                   hint="is tshark installed? run `testbed doctor`") from exc
            assert proc.stdout is not None
            blocks: queue.Queue[bytes] = queue.Queue()
            reader = threading.Thread(target=_drain, args=(proc.stdout, blocks), daemon=True)
            reader.start()
            deadline = time.monotonic() + timeout
            pending = b""
            try:
                while True:
                    try:
                        block = blocks.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                    except queue.Empty:
                        if time.monotonic() >= deadline:
                            msg = f"tshark timed out after {timeout:g} s reading {pcap}"
                            raise ToolError(argv, None, "", "", message=msg) from None
                        continue
                    if not block:
                        break
                    pending += block
                    if len(pending) >= chunk_bytes:
                        cut = pending.rfind(b"\n") + 1
                        if cut:
                            handle(pending[:cut].decode("utf-8", errors="replace"))
                            pending = pending[cut:]
                if pending:
                    handle(pending.decode("utf-8", errors="replace"))
                returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                reader.join(timeout=5)
            err.seek(0)
            stderr = err.read().decode("utf-8", errors="replace")
    return ExportOutcome(argv, returncode, stderr)


def _drain(stream: IO[bytes], blocks: queue.Queue[bytes]) -> None:
    try:
        while True:
            block = stream.read1(1 << 20)  # type: ignore[attr-defined]
            blocks.put(block)
            if not block:
                return
    finally:
        stream.close()


def run_export(pcap: Path, *, broker_port: int, tls: bool, keylogs: Sequence[Path] = (),
               timeout: float = 1800.0) -> subprocess.CompletedProcess[str]:
    """Run the export pass and return tshark's result whatever its exit code (the caller judges it)."""
    with merged_keylog(keylogs) as keylog:
        argv = fields_argv(pcap, broker_port=broker_port, tls=tls, keylog=keylog)
        return run(argv, check=False, timeout=timeout, hint="is tshark installed? run `testbed doctor`")


def export_failed(pcap: Path, argv: Sequence[str], returncode: int, stderr: str) -> ToolError:
    return ToolError([str(a) for a in argv], returncode, "", stderr,
                     message=f"tshark could not read {pcap} (exit {returncode})")


def export_fields(pcap: Path, *, broker_port: int, tls: bool, keylogs: Sequence[Path] = (),
                  allow_truncated: bool = False, timeout: float = 1800.0) -> str:
    """Run the export; return tshark's stdout. A cut-short file is accepted when ``allow_truncated``."""
    proc = run_export(pcap, broker_port=broker_port, tls=tls, keylogs=keylogs, timeout=timeout)
    if proc.returncode != 0 and not (allow_truncated and "cut short" in proc.stderr):
        raise export_failed(pcap, proc.args, proc.returncode, proc.stderr)
    return proc.stdout


def parse_fields(text: str) -> pd.DataFrame:
    """tshark's tab-separated output -> per-packet DataFrame (multi-valued columns stay strings)."""
    names = [c for c, _ in FIELDS]
    if not text.strip():
        return pd.DataFrame({c: pd.Series(dtype="float64" if c in NUMERIC else object) for c in names})
    first = text[:text.find("\n")] if "\n" in text else text
    if first.count("\t") != len(names) - 1:
        raise TestbedError(f"tshark printed {first.count(chr(9)) + 1} columns, expected {len(names)}",
                           evidence=first[:300])
    dtypes: dict[str, object] = {c: object for c in names}
    dtypes.update({c: "float64" for c in NUMERIC})
    dtypes.update({"frame": "int64", "frame_len": "int64"})
    common = dict(sep="\t", header=None, names=names, keep_default_na=False, quoting=3, engine="c")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=dtypes, na_values={c: [""] for c in NUMERIC}, **common)
    except ValueError:
        # a numeric field repeated in some frame (e.g. ICMP quoting a TCP header): keep its first value
        df = pd.read_csv(io.StringIO(text), dtype=object, na_filter=False, **common)
        for col in NUMERIC:
            first = df[col].str.split(AGGREGATOR, regex=False).str[0]
            df[col] = pd.to_numeric(first, errors="coerce")
        df["frame"] = df["frame"].astype("int64")
        df["frame_len"] = df["frame_len"].astype("int64")
    flags = df["tcp_flags"]
    table = {v: (int(v.split(AGGREGATOR)[0], 16) if v else -1) for v in flags.unique()}
    df["tcp_flags"] = flags.map(table).astype("int64")
    df["retrans"] = (df["retrans"] != "") | (df["fast_retrans"] != "")
    df["fast_retrans"] = df["fast_retrans"] != ""
    return df
