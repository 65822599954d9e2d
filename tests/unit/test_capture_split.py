"""A block's capture cut per cell (orchestrator/lab/capture_split.py): every packet in exactly one cell or in the
gaps, each output a pcapng tshark reads, a capture still being written read only up to its last whole block."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.lab.capture_split import CaptureSplitter, count_packets

FIXTURE = Path(__file__).parents[1] / "fixtures" / "connections" / "t12_session_id.pcapng"  # 4 TLS connections


def _frames(path: Path) -> list[tuple[float, int]]:
    """(time, connection: the client's port) of every frame, as tshark reads the file."""
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch", "-e", "tcp.srcport",
                          "-e", "tcp.dstport"], capture_output=True, text=True, check=True).stdout
    return [(float(t), max(int(a), int(b))) for t, a, b in (line.split("\t") for line in out.splitlines() if line)]


@pytest.fixture(scope="module")
def frames() -> list[tuple[float, int]]:
    if shutil.which("tshark") is None:
        pytest.fail("tshark is missing (scripts/ensure-system.sh check installs it)")
    return _frames(FIXTURE)


def test_two_cells_and_the_gaps_hold_every_packet_once(tmp_path: Path, frames: list[tuple[float, int]]) -> None:
    mid = frames[len(frames) // 2][0]  # inside a connection: its later packets are not the second cell's
    split = CaptureSplitter(FIXTURE, tmp_path / "gaps.pcapng")
    a = split.cut("a", frames[0][0] - 1, mid, tmp_path / "a.pcapng")
    b = split.cut("b", mid, frames[-1][0] + 1, tmp_path / "b.pcapng")
    record = split.finish()
    got = {name: _frames(tmp_path / f"{name}.pcapng") for name in ("a", "b", "gaps")}
    assert sorted(got["a"] + got["b"] + got["gaps"]) == sorted(frames)  # lossless, no packet twice
    assert record == {"packets": len(frames), "in_cells": a.packets + b.packets, "in_gaps": len(got["gaps"]),
                      "lossless": 1}
    assert all(t < mid for t, _ in got["a"]) and all(t >= mid for t, _ in got["b"] + got["gaps"])
    straddling = {s for t, s in frames if t < mid} & {s for t, s in frames if t >= mid}
    assert straddling and {s for _, s in got["gaps"]} == straddling and b.to_gaps == len(got["gaps"]) > 0
    assert not straddling & {s for _, s in got["b"]}  # a connection begun before the cell is not the cell's


def test_a_capture_still_being_written_is_read_up_to_its_last_whole_block(
        tmp_path: Path, frames: list[tuple[float, int]]) -> None:
    data = FIXTURE.read_bytes()
    growing = tmp_path / "capture.pcapng"
    growing.write_bytes(data[:len(data) // 2 + 7])  # a torn block at the end, as a write in progress leaves it
    split = CaptureSplitter(growing, tmp_path / "gaps.pcapng")
    first = split.cut("a", frames[0][0] - 1, frames[-1][0] + 1, tmp_path / "a.pcapng")
    assert 0 < first.packets < len(frames) and first.to_gaps == 0
    with growing.open("ab") as f:
        f.write(data[len(data) // 2 + 7:])
    split.cut("b", frames[-1][0] + 1, frames[-1][0] + 2, tmp_path / "b.pcapng")
    record = split.finish()
    assert count_packets(tmp_path / "a.pcapng") == first.packets and count_packets(tmp_path / "b.pcapng") == 0
    assert record == {"packets": len(frames), "in_cells": first.packets, "in_gaps": len(frames) - first.packets,
                      "lossless": 1}  # what came after the first cut (of no window) is in the gaps
    assert len(_frames(tmp_path / "gaps.pcapng")) == len(frames) - first.packets


def test_a_cut_knows_when_the_file_holds_everything_before_a_time(
        tmp_path: Path, frames: list[tuple[float, int]]) -> None:
    data = FIXTURE.read_bytes()
    growing = tmp_path / "capture.pcapng"
    growing.write_bytes(data[:len(data) // 2])
    split = CaptureSplitter(growing, tmp_path / "gaps.pcapng")
    last = frames[-1][0]
    assert split.seen_after(frames[0][0]) and not split.seen_after(last)  # dumpcap has not written the rest yet
    growing.write_bytes(data)
    assert split.seen_after(last)
    split.cut("a", frames[0][0], last + 1, tmp_path / "a.pcapng")
    assert split.finish()["in_cells"] == len(frames)  # peeking consumed nothing and read the header once


def _pcapng(frames: list[tuple[float, int, int]]) -> bytes:
    """A pcapng (Ethernet, microseconds) of TCP frames 10.0.0.2:sport -> 10.0.0.1:8883: (time, sport, TCP flags)."""
    import struct

    def block(kind: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(0x00000001, struct.pack("<HHI", 1, 0, 0))
    for t, sport, flags in frames:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
        tcp = struct.pack("!HHIIBBHHH", sport, 8883, 1, 0, 0x50, flags, 65535, 0, 0)
        frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp
        us = round(t * 1e6)
        out += block(0x00000006, struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(frame), len(frame)) + frame)
    return out


def test_a_syn_on_the_ports_of_an_earlier_cells_connection_is_a_new_connection_of_this_cell(tmp_path: Path) -> None:
    """A reconnecting device makes hundreds of connections in a block and the kernel reuses its ephemeral ports: the
    new connection (its SYN) is the cell's it began in; a late segment of the old one without a SYN is not."""
    syn, ack = 0x02, 0x10
    capture = tmp_path / "capture.pcapng"
    capture.write_bytes(_pcapng([(1.0, 40000, syn), (1.1, 40000, ack), (1.2, 40001, syn),
                                 (2.1, 40001, ack),                      # cell b: a late segment of a's connection
                                 (2.2, 40000, syn), (2.3, 40000, ack)]))  # cell b: port 40000 again, a new connection
    split = CaptureSplitter(capture, tmp_path / "gaps.pcapng")
    a = split.cut("a", 0.5, 2.0, tmp_path / "a.pcapng")
    b = split.cut("b", 2.0, 3.0, tmp_path / "b.pcapng")
    assert split.finish() == {"packets": 6, "in_cells": 5, "in_gaps": 1, "lossless": 1}
    assert (a.packets, b.packets, b.to_gaps) == (3, 2, 1)
    assert [port for _, port in _frames(tmp_path / "b.pcapng")] == [40000, 40000]
    assert [port for _, port in _frames(tmp_path / "gaps.pcapng")] == [40001]


def test_a_full_disk_at_the_cut_is_a_disk_full_error_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     frames: list[tuple[float, int]]) -> None:
    """The fault suite's disk-full case: the cell's line said only 'failed CELL' (a bare OSError from the cut)."""
    import errno
    import io

    from orchestrator.lab import capture_split
    from orchestrator.results.space import DiskFull

    class Full(io.BytesIO):  # the cut's file, opened with its mode (0600), on a full disk
        def write(self, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    split = CaptureSplitter(FIXTURE, tmp_path / "gaps.pcapng")
    monkeypatch.setattr(capture_split, "open_with_mode", lambda _path, append=False: Full())
    with pytest.raises(DiskFull, match=r"disk full: cannot write .*a\.pcapng"):
        split.cut("a", frames[0][0] - 1, frames[-1][0] + 1, tmp_path / "a.pcapng")



def _containers(*running: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(service=s, state=SimpleNamespace(running=s in running))
            for s in ("broker", "capture", "subscriber", "publisher")]


def _cut_s(tmp_path: Path, frames: list[tuple[float, int]], monkeypatch: pytest.MonkeyPatch,
           running: list[str]) -> tuple[float, dict[str, object]]:
    """A kept-up lab's cut of the whole fixture up to after its last packet (so no packet after the end is in the
    file), with these containers running: how long it waited, and what the cell records of it."""
    from orchestrator.lab import keptlab
    from orchestrator.model.layout import Layout

    monkeypatch.setattr(keptlab, "CUT_WAIT_S", 2.0)
    monkeypatch.setattr(keptlab.compose, "containers", lambda: _containers(*running))
    lab = keptlab.KeptLab(tmp_path / "blocks")
    lab.splitter = CaptureSplitter(FIXTURE, tmp_path / "gaps.pcapng")
    lab.facts = {"folder": "blocks/lab-001"}
    run = Layout(tmp_path / "runs" / "c")
    run.capture.parent.mkdir(parents=True)
    started = time.monotonic()
    lab._cut(run, frames[0][0] - 1, frames[-1][0] + 1)
    return time.monotonic() - started, lab.facts["capture"]


@pytest.mark.parametrize("dead", ["broker", "capture", "subscriber"])
def test_a_kept_up_cut_stops_waiting_for_a_later_packet_once_a_container_that_would_bring_it_is_gone(
        tmp_path: Path, frames: list[tuple[float, int]], monkeypatch: pytest.MonkeyPatch, dead: str) -> None:
    """The cut waits for a packet from after the cell's end (the stopped subscriber's closing segments): with the
    subscriber's, the broker's or the capture's container gone, none comes, and the cut ends within a second instead
    of at CUT_WAIT_S, saying it is not complete."""
    took, facts = _cut_s(tmp_path, frames, monkeypatch, [s for s in ("broker", "capture", "subscriber") if s != dead])
    assert took < 1.2
    assert facts["complete"] is False and facts["packets"] == len(frames)


def test_a_kept_up_cut_with_its_lab_up_waits_for_a_later_packet_up_to_its_bound(
        tmp_path: Path, frames: list[tuple[float, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    took, facts = _cut_s(tmp_path, frames, monkeypatch, ["broker", "capture", "subscriber"])
    assert took >= 2.0 and facts["complete"] is False and facts["packets"] == len(frames)
