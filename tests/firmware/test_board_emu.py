"""The serial control protocol end to end: orchestrator.publishers.board.link drives the REAL board-emu
(the firmware's BoardSession on a pseudo-terminal, 256-byte receive buffer like an Arduino)."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from board_emu_support import wait_exit
from fwtest_support import Pki

from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.lines import Banner, BoardError, ClockSample, Done, Handshake, Msg, Sync
from orchestrator.publishers.board.link import BoardLink, BoardLinkError, BoardRebooted, BoardRunRefused

CHACHA = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
REFUSED = p.RunCell(id="refused-1", host="127.0.0.1", port=1, transport="plain", payload=65, samples=3,
                    interval_us=1000, connect_timeout_ms=1)


def _tls_cell(pki: Pki, port: int, **kw: object) -> p.RunCell:
    fields = dict(id="tls-1", host="127.0.0.1", port=port, transport="tls", payload=65, samples=5,
                  interval_us=20000, ciphers=(CHACHA,), ca=pki.ca.read_text(), server_name="localhost",
                  connect_timeout_ms=2000)
    fields.update(kw)
    return p.RunCell(**fields)  # type: ignore[arg-type]


def _plain_cell(port: int, run_id: str, samples: int) -> p.RunCell:
    return p.RunCell(id=run_id, host="127.0.0.1", port=port, transport="plain", payload=65, samples=samples,
                     interval_us=20000)


def _run(link: BoardLink, cell: p.RunCell, idle_s: float = 10.0) -> list:
    link.send_run(cell)
    return list(link.run_lines(idle_s))


def test_banner_then_ready_over_the_pty(board_emu) -> None:
    emu = board_emu()
    with BoardLink(emu.pty) as link:
        banner = link.wait_ready(timeout_s=10)
    assert banner.proto == p.VERSION and banner.board == "emulated" and banner.rx_buf == 256
    assert "> HELLO" not in link.transcript  # the emulator resets when the port opens, like a DevKit


def test_hello_for_a_board_that_does_not_reset_on_open(board_emu) -> None:
    emu = board_emu("--no-reset-on-open")
    time.sleep(0.5)  # its banner went out before anyone listened
    with BoardLink(emu.pty) as link:
        banner = link.wait_ready(timeout_s=10, hello_after_s=0.3)
    assert isinstance(banner, Banner)
    assert "> HELLO" in link.transcript


def test_tls_run_is_chunked_and_acked_for_a_256_byte_buffer(board_emu, pki: Pki) -> None:
    emu = board_emu("--rx-buffer", "256")
    wire: list[str] = []  # unredacted: the chunks themselves are compared
    with BoardLink(emu.pty, wire=wire) as link:
        link.wait_ready(timeout_s=10)
        cell = _tls_cell(pki, port=1, connect_timeout_ms=1)
        link.send_run(cell)
        lines = list(link.run_lines(10))
    frames = p.encode_run(cell, 256)
    assert len(frames.body) > 256 and len(frames.chunks) >= 3  # the CA alone does not fit the buffer
    assert all(len(c) + 1 <= 256 for c in frames.chunks)
    sent = [t[2:] for t in wire if t.startswith("> RUN CHUNK")]
    acks = [t[2:] for t in wire if t.startswith("< ACK chunk")]
    # the kept evidence names each chunk but never holds its base64 (the body carries the credentials)
    assert not any(c.split()[-1] in t for c in frames.chunks for t in link.transcript)
    assert sent == list(frames.chunks) and acks == [f"ACK chunk i={i}" for i in range(len(frames.chunks))]
    assert lines[-1] == BoardError("ConnectRefused", "TCP connect to 127.0.0.1:1 failed: Connection refused")
    assert "0 bytes dropped" in emu.stop()


def test_without_flow_control_the_buffer_overflows_and_the_board_names_it(board_emu, pki: Pki) -> None:
    emu = board_emu("--rx-buffer", "256")
    frames = p.encode_run(_tls_cell(pki, port=1), 256)
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        link.write_line("\n".join([frames.begin, *frames.chunks, frames.end]))  # all at once, no ACK awaited
        time.sleep(0.3)
        link.write_line(frames.end)  # ends whatever line the board was left holding
        errors = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not errors:
            line = link.read_line(0.5)
            if isinstance(line, BoardError):
                errors.append(line)
    assert errors and errors[0].name in {"ChunkMissing", "BadEncoding", "LineTooLong", "LengthMismatch"}
    assert "receive buffer (256 bytes) full: dropped" in emu.stop()


def test_bad_crc_is_refused_by_name_then_the_board_is_ready_again(board_emu) -> None:
    emu = board_emu()
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        good = p.encode_run(REFUSED, 256)
        bad = dataclasses.replace(good, begin=good.begin[:-8] + "00000000")
        with pytest.raises(BoardRunRefused) as refused:
            link.send_frames(bad, REFUSED.id)
        assert refused.value.name == "CrcMismatch"
        assert "RUN BEGIN announced 00000000" in str(refused.value)
        lines = _run(link, REFUSED)  # the same boot takes the next RUN
    assert lines[-1].name == "ConnectRefused"


def test_unknown_key_and_missing_key_are_named(board_emu) -> None:
    emu = board_emu()
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        body = p.encode_body(REFUSED)
        with pytest.raises(BoardRunRefused) as unknown:
            link.send_frames(p.frame_body(body + b"colour=blue\n", 256), REFUSED.id)
        assert unknown.value.name == "UnknownKey" and '"colour"' in unknown.value.board_message
        with pytest.raises(BoardRunRefused) as missing:
            link.send_frames(p.frame_body(body.replace(b"qos=0\n", b""), 256), REFUSED.id)
        assert missing.value.name == "MissingKey" and '"qos"' in missing.value.board_message


def test_version_mismatch_names_both_versions_and_the_fix(board_emu) -> None:
    emu = board_emu("--banner-proto", "1")
    with BoardLink(emu.pty) as link, pytest.raises(p.VersionMismatch) as mismatch:
        link.wait_ready(timeout_s=10)
    message = str(mismatch.value)
    assert "version 1" in message and f"version {p.VERSION}" in message and emu.pty in message
    assert "testbed firmware build && testbed firmware upload" in (mismatch.value.hint or "")


def test_timeout_names_port_and_baud(tmp_path) -> None:
    import os
    import pty

    master, slave = pty.openpty()
    try:
        with BoardLink(os.ttyname(slave), baud=115200) as link, pytest.raises(Exception) as timeout:
            link.wait_ready(timeout_s=0.5, hello_after_s=0.1)
        assert os.ttyname(slave) in str(timeout.value) and "115200 Bd" in str(timeout.value)
        assert "> HELLO" in link.transcript
    finally:
        os.close(master)
        os.close(slave)


def test_permission_denied_names_the_dialout_group() -> None:
    def deny(port: str, baud: int):
        raise PermissionError(13, f"could not open port {port}: [Errno 13] Permission denied")

    with pytest.raises(BoardLinkError) as denied:
        BoardLink("/dev/ttyUSB0", opener=deny).open()
    assert "/dev/ttyUSB0" in str(denied.value) and "dialout" in (denied.value.hint or "")


# ------------------------------------------------------------------ with a real Mosquitto
def test_one_boot_serves_a_plain_and_a_tls_run(board_emu, broker_factory, pki: Pki) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--send-jitter-us", "3000", "--seed", "7")
    wire: list[str] = []
    with BoardLink(emu.pty, wire=wire) as link:
        link.wait_ready(timeout_s=10)
        plain = _run(link, p.RunCell(id="plain-1", host="127.0.0.1", port=broker.plain_port, transport="plain",
                                     payload=65, samples=4, interval_us=10000))
        tls = _run(link, _tls_cell(pki, broker.tls_port, keylog=True))
    assert [m.seq for m in plain if isinstance(m, Msg)] == [0, 1, 2, 3]
    assert plain[-1] == Done(4, "plain-1")
    shake = next(x for x in tls if isinstance(x, Handshake))
    assert shake.version == "TLSv1.2" and shake.suite == CHACHA and shake.tls_ms is not None
    assert all(m.bytes == 65 for m in tls if isinstance(m, Msg)) and tls[-1] == Done(5, "tls-1")
    assert any(t.startswith("< KEYLOG CLIENT_RANDOM ") for t in wire)  # the board sent its key log
    assert not any("CLIENT_RANDOM" in t for t in link.transcript)  # which the kept evidence never holds


def test_reboot_mid_run_is_reported_and_the_next_boot_serves(board_emu, broker_factory) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--reboot-after-messages", "2")
    cell = _plain_cell(broker.plain_port, "r1", 6)
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        link.send_run(cell)
        with pytest.raises(BoardRebooted):
            list(link.run_lines(10))
        link.wait_ready(timeout_s=10)
        lines = _run(link, cell.replace(id="r2"))
    assert lines[-1] == Done(6, "r2")


def test_unplugged_mid_run(board_emu, broker_factory) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu("--exit-after-messages", "2")
    cell = _plain_cell(broker.plain_port, "u1", 50)
    seen = []
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        link.send_run(cell)
        with pytest.raises(BoardLinkError) as gone:
            for line in link.run_lines(5):
                seen.append(line)
    assert [m.seq for m in seen if isinstance(m, Msg)] == [0, 1]
    assert "went away" in str(gone.value) or "printed nothing" in str(gone.value)
    assert wait_exit(emu) == 0


def test_the_hosts_stop_ends_a_run_before_its_next_message_and_the_board_serves_again(board_emu,
                                                                                      broker_factory) -> None:
    broker = broker_factory("ECDHE-ECDSA-CHACHA20-POLY1305")
    emu = board_emu()
    cell = _plain_cell(broker.plain_port, "s1", 500)
    seen = []
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        link.send_run(cell)
        for line in link.run_lines(5):
            seen.append(line)
            if isinstance(line, Msg) and line.seq == 3:
                link.write_line(p.CMD_STOP)
        link.write_line(p.CMD_STOP)  # no run going: just READY again
        assert link.read_text(5) == p.LINE_READY
        again = _run(link, cell.replace(id="s2", samples=3))
    sent = [m.seq for m in seen if isinstance(m, Msg)]
    assert 4 <= len(sent) <= 6 and sent == list(range(len(sent))), sent  # within a message or two of STOP
    assert isinstance(seen[-1], BoardError) and seen[-1].name == "Interrupted", seen[-1]
    assert again[-1] == Done(3, "s2")


# ------------------------------------------------------------------ clock exchanges
@pytest.fixture
def time_echo() -> Iterator[int]:
    """A minimal time-echo service (the 40-byte wire format of time_sync.h) on a free UDP port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, addr = sock.recvfrom(64)
            except TimeoutError:
                continue
            t2 = time.time_ns() // 1000
            if len(data) != 40 or data[:4] != b"TBTS":
                continue
            seq, t1 = struct.unpack(">I4xq", data[8:24])
            sock.sendto(b"TBTS" + struct.pack(">BBHI4xqqq", 1, 2, 0, seq, t1, t2, time.time_ns() // 1000), addr)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    sock.close()


def test_clock_exchanges_before_and_after_see_the_injected_offset(board_emu, time_echo: int) -> None:
    emu = board_emu("--clock-offset-us", "5000000", "--drift-ppm", "50")
    cell = REFUSED.replace(sync_host="127.0.0.1", sync_port=time_echo, sync_count=4)
    with BoardLink(emu.pty) as link:
        link.wait_ready(timeout_s=10)
        lines = _run(link, cell)
    samples = [x for x in lines if isinstance(x, ClockSample)]
    assert [(s.phase, s.i) for s in samples] == [("pre", i) for i in range(4)] + [("post", i) for i in range(4)]
    for s in samples:
        offset = ((s.t1_us - s.t2_us) + (s.t4_us - s.t3_us)) / 2
        assert abs(offset - 5_000_000) < 50_000
    assert [x for x in lines if isinstance(x, Sync)] == [Sync("pre", 4, 4, "Ok"), Sync("post", 4, 4, "Ok")]
    assert lines[-1].name == "ConnectRefused"
