"""A board (a real ESP32, or board-emu) as the publisher of one run, over a serial link opened once per sweep.

go() sends the cell's RUN; a reader thread then streams every line the board prints into logs/serial.log
(a declared secret, 0600: it carries the KEYLOG lines) and keeps the parsed lines. When the board says DONE or
ERROR (or the link breaks) the thread writes what the analysis reads, as the virtual device does
(records.py): publisher.csv on the lab's clock, publisher_summary.json, keylogs/publisher.keys.
A failed run leaves logs/serial_transcript.log: the link's last lines both ways, redacted as they were
recorded (no RUN chunk, KEYLOG line or password), 0600 and left out of archives all the same.
A link that broke (unplugged board, reboot) is remembered: the next cells of the sweep fail at once
with the same cause (``BoardLinks``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import TestbedError
from orchestrator.lab.pki import Pki
from orchestrator.model.layout import Layout, file_mode
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import records
from orchestrator.publishers.board.lines import BoardError, BoardLine, Conn, Done, Msg
from orchestrator.publishers.board.link import DEFAULT_BAUD, BoardLink, BoardLinkError, BoardRebooted
from orchestrator.redact import redact
from orchestrator.results.atomic import write_text_atomic

SERVICE = "board"  # no container: a failure is the board's own (error())
IDLE_S = 30.0  # a run's longest silence beyond one interval: the board's own timeouts (connect, PUBACK,
# the 20 s drain after DISCONNECT) end a run by name within it
# (the board ends its own waits sooner: PUBACK 10 s, the close after DISCONNECT 20 s, kDrainTimeoutMs)


class BoardLinks:
    """One open link per serial port for the life of a sweep (opening a port can reset the board)."""

    def __init__(self) -> None:
        self._links: dict[str, BoardLink] = {}
        self._broken: dict[str, str] = {}
        self._stale: set[str] = set()

    def get(self, port: str, baud: int = DEFAULT_BAUD, *, reset: bool = False) -> BoardLink:
        """The port's link, opened (and the board's READY awaited) the first time; ``reset``: a link already
        open resets the board first (DTR/RTS) and waits for its READY again."""
        if port in self._broken:
            raise TestbedError(f"the board on {port} is unusable since an earlier cell: {self._broken[port]}",
                               hint="check the cable and the board, then resume the sweep")
        link = self._links.get(port)
        if link is None:
            link = BoardLink(port, baud=baud)
            try:
                link.open()
                link.wait_ready()
            except TestbedError as exc:
                link.close()
                self._broken[port] = exc.message
                raise
            self._links[port] = link
        elif port in self._stale or reset:
            self._stale.discard(port)
            try:
                if reset:
                    link.reset()
                link.wait_ready(timeout_s=30)
            except TestbedError as exc:
                self.broke(port, exc.message)
                raise
        return link

    def adopt(self, link: BoardLink) -> None:
        """A link opened and READY elsewhere (`testbed board check`, which names the port's and the banner's
        problems itself) becomes its port's link, so the cell does not open the port again."""
        self._broken.pop(link.port, None)
        self._links[link.port] = link

    def rebooted(self, port: str) -> None:
        """The board reset mid-cell: the link stays, the next cell waits for its READY again."""
        self._stale.add(port)

    def broke(self, port: str, why: str) -> None:
        self._broken[port] = why
        link = self._links.pop(port, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
        self._broken.clear()
        self._stale.clear()


LINKS = BoardLinks()


def private_append(path: Path) -> int:
    """An append-only descriptor on ``path``, created with its declared mode (0600 for a secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, file_mode(path))
    os.fchmod(fd, file_mode(path))  # also a file an older version left 0644
    return fd


@dataclass
class BoardPublisher:
    scenario: Scenario
    lay: Layout
    pki: Pki | None
    spec: RunSpec
    broker_host: str  # the broker as the board reaches it: an address of the lab host, the published port
    broker_port: int
    sync: tuple[str, int] | None = None  # the time-echo service, same address
    service: str = SERVICE
    lines: list[BoardLine] = field(default_factory=list)
    failure: str | None = None
    _thread: threading.Thread | None = None
    _link: BoardLink | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> str:
        return str(self.spec.serial_port)

    def cell(self) -> p.RunCell:
        return records.run_cell(self.scenario, self.lay, self.pki, self.spec, self.broker_host, self.broker_port,
                                self.sync)

    def start(self, topo: object) -> None:
        """The board is there and READY (reset first with --reset-board); go() sends the RUN."""
        LINKS.get(self.port, self.spec.baud, reset=self.spec.reset_board)

    def go(self) -> None:
        link = LINKS.get(self.port, self.spec.baud)
        try:
            link.send_run(self.cell())
        except TestbedError as exc:
            self._fail(link, exc)
            raise TestbedError(f"the board did not take the RUN: {exc.message}", evidence=exc.evidence) from exc
        self._link = link
        self._thread = threading.Thread(target=self._read, args=(link,), name="board-reader", daemon=True)
        self._thread.start()

    def _read(self, link: BoardLink) -> None:
        fd = private_append(self.lay.serial_log)
        try:
            for line in link.run_lines(IDLE_S + self.spec.interval_ms / 1000):
                os.write(fd, (link.last_text + "\n").encode("utf-8", "replace"))
                self.lines.append(line)
                if isinstance(line, Msg):
                    records.append_send(self.lay, line)
                elif isinstance(line, Conn):
                    records.append_connection(self.lay, line)
                if isinstance(line, BoardError):
                    self.failure = f"the board reported {line.name}: {line.message}"
        except TestbedError as exc:
            self._fail(link, exc)
        finally:
            os.close(fd)
            records.write_outputs(self.lay, self.lines, self.failure, link.banner)
            self._done.set()

    def _fail(self, link: BoardLink, exc: TestbedError) -> None:
        self.failure = exc.message
        if isinstance(exc, BoardRebooted):
            LINKS.rebooted(self.port)
        elif isinstance(exc, BoardLinkError):
            LINKS.broke(self.port, exc.message)
        # redacted as recorded (BoardLink.transcript), once more here; the mode is the declared one (0600)
        write_text_atomic(self.lay.serial_transcript, redact(link.evidence(400)) + "\n")

    def wait_exit(self, timeout_s: float) -> int | None:
        if self._thread is None:
            return 1
        if not self._done.wait(timeout_s):
            return None
        done = any(isinstance(x, Done) for x in self.lines)
        return 0 if done and self.failure is None else 1

    def stop(self, timeout_s: float = 10.0) -> None:
        """A run still going (the cell failed, or Ctrl-C): STOP, and wait until the board ended it, so the
        next cell (or the next sweep) finds it READY. A board that cannot be told is left to its link."""
        if self._thread is None or self._done.is_set():
            return
        try:
            if self._link is not None:
                self._link.write_line(p.CMD_STOP)
        except TestbedError:  # gone (unplugged): the reader names it
            return
        self._done.wait(timeout_s + self.spec.interval_ms / 1000)

    def error(self) -> str:
        if self.failure:
            return self.failure
        if self._thread is not None and not self._done.is_set():
            return f"the board on {self.port} is still publishing"
        return f"the board on {self.port} ended the run without DONE"
