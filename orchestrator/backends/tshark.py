"""tshark: the ONE export pass over a capture that analysis reads (``analysis.fields.FieldExporter``).

``-T fields -E occurrence=a``: every occurrence of a field in a frame, joined with the request's
aggregator, because several MQTT messages (and TLS records) can share one TCP segment. Key logs
are merged into one temporary file for ``-o tls.keylog_file:``; non-standard ports get decode-as
rules. The program runs through ``backends.process`` like every other.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.backends.process import run, stream
from orchestrator.errors import TestbedError
from orchestrator.model.export import ExportOutcome, ExportRequest

WS_MQTT_LUA = Path(__file__).with_name("ws_mqtt.lua")  # MQTT in WebSocket frames, for tshark 4.0
MQTT_PORT = 1883
MQTTS_PORT = 8883
HINT = "is tshark installed? run `testbed doctor`"
# A 64 KiB segment holds at most ~3,000 TLS records (5 B header + 16 B AEAD tag + 1 B): far below this.
MAX_LAYERS = 65536
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
    # every TLS record a frame hands to MQTT is one more protocol layer of it; past this many layers
    # tshark stops with "Dissector bug ... saved_layers_len < prefs.gui_max_tree_depth" and decodes no
    # MQTT in the rest of the stream. The default, 500, is reached by one 64 KiB loopback segment of a
    # broker sending ~2,000 PUBLISH/s to one subscriber (623 records of 105 bytes)
    f"gui.max_tree_depth:{MAX_LAYERS}",
)


def decode_as_args(broker_port: int, tls: bool, websocket: bool = False) -> list[str]:
    """Decode-as rules for a broker on a non-standard port (none for 1883 plain / 8883 TLS); with ``websocket`` the
    broker's port carries HTTP (its upgrade, then WebSocket frames: ws_mqtt.lua hands their payload to MQTT)."""
    if websocket:
        return ["-d", f"tcp.port=={broker_port},tls", "-d", f"tls.port=={broker_port},http"] if tls else \
            ["-d", f"tcp.port=={broker_port},http"]
    if tls and broker_port != MQTTS_PORT:
        return ["-d", f"tcp.port=={broker_port},tls", "-d", f"tls.port=={broker_port},mqtt"]
    if not tls and broker_port != MQTT_PORT:
        return ["-d", f"tcp.port=={broker_port},mqtt"]
    return []


def fields_argv(request: ExportRequest, keylog: Path | None, *, tshark: str = "tshark") -> list[str]:
    """The tshark command line of the one export pass (``keylog``: the merged key log, if any)."""
    argv = [tshark, "-n", "-r", str(request.pcap), "-T", "fields", "-E", "header=n", "-E", "separator=/t",
            "-E", "occurrence=a", "-E", f"aggregator={request.aggregator}", "-E", "quote=n"]
    for pref in PREFERENCES:
        argv += ["-o", pref]
    if keylog is not None:
        argv += ["-o", f"tls.keylog_file:{keylog}"]
    argv += decode_as_args(request.broker_port, request.tls, request.websocket)
    if request.websocket:
        argv += ["-X", f"lua_script:{WS_MQTT_LUA}"]
    for name in request.fields:
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


def _whole_lines(blocks: Iterable[bytes], chunk_bytes: int) -> Iterator[str]:
    """Output blocks -> text chunks of at least ``chunk_bytes`` cut after a newline (the rest last).

    The blocks are kept in a list and joined once per chunk: appending each to one growing buffer
    would copy that buffer again for every block.
    """
    parts: list[bytes] = []
    size = 0
    for block in blocks:
        parts.append(block)
        size += len(block)
        if size >= chunk_bytes:
            pending = b"".join(parts)
            cut = pending.rfind(b"\n") + 1
            if cut:
                yield pending[:cut].decode("utf-8", errors="replace")
                pending = pending[cut:]
            parts, size = ([pending] if pending else []), len(pending)
    rest = b"".join(parts)
    if rest:
        yield rest.decode("utf-8", errors="replace")


def export_chunks(request: ExportRequest, handle: Callable[[str], None], *, timeout: float = 1800.0,
                  chunk_bytes: int = 4 << 20) -> ExportOutcome:
    """Run the export pass and give its output to ``handle`` in whole-line chunks WHILE tshark runs.

    ``process.run`` buffers a program's whole output; here (``process.stream``) parsing overlaps
    tshark's own work (tshark uses one core, parsing the other), which is what keeps the analysis
    close to a bare export. A missing program is a TestbedError, a timeout a ToolError; the exit
    code is returned for the caller to judge (a truncated capture exits 2 after printing every
    complete packet).
    """
    with merged_keylog(request.keylogs) as keylog, \
            stream(fields_argv(request, keylog), check=False, timeout=timeout, hint=HINT) as out:
        for text in _whole_lines(out.blocks(), chunk_bytes):
            handle(text)
    assert out.returncode is not None  # set when the stream ends normally
    return ExportOutcome(out.argv, out.returncode, out.stderr)


def export_fields(request: ExportRequest, *, allow_truncated: bool = False, timeout: float = 1800.0) -> str:
    """Run the export; return tshark's stdout. A cut-short file is accepted when ``allow_truncated``."""
    with merged_keylog(request.keylogs) as keylog:
        proc = run(fields_argv(request, keylog), check=False, timeout=timeout, hint=HINT)
    if proc.returncode != 0 and not (allow_truncated and "cut short" in proc.stderr):
        raise ExportOutcome(list(proc.args), proc.returncode, proc.stderr).error(request.pcap)
    return proc.stdout
