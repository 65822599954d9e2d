"""One board on one serial port: open it once, wait for BANNER + READY, send RUNs with the chunk/ACK
flow control, read the run's lines. A whole sweep goes through one BoardLink (one boot, many RUNs).

The board may or may not reset when the port opens (an ESP32 DevKit's DTR/RTS auto-reset usually
does). Either way :meth:`BoardLink.wait_ready` ends with a fresh READY: a board that says nothing for
``hello_after_s`` is sent HELLO, which it answers with BANNER + READY.

The transcript (the last lines both ways, the evidence of a failure) is redacted as it is written
(orchestrator/redact.py): a RUN chunk, a KEYLOG line, a password never enter it.
"""

from __future__ import annotations

import errno
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

import serial

from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.lines import Ack, Banner, BoardError, BoardLine, Ready, parse_line
from orchestrator.redact import redact
from orchestrator.waiting import REAL_CLOCK, Clock, wait_until

DEFAULT_BAUD: int = AXES["baud"].default
READ_SLICE_S = 0.05


class SerialPort(Protocol):  # what BoardLink uses of a pyserial port
    @property
    def in_waiting(self) -> int: ...
    def read(self, size: int = 1) -> bytes: ...
    def write(self, data: bytes) -> int | None: ...
    def flush(self) -> None: ...
    def reset_input_buffer(self) -> None: ...
    def close(self) -> None: ...


class BoardLinkError(TestbedError):
    """The serial port cannot be used, or the board went away."""


class BoardRunRefused(p.BoardProtocolError):
    """The board answered a RUN with ERROR <name>: <message>."""

    def __init__(self, name: str, message: str, where: str) -> None:
        super().__init__(f"the board on {where} refused the RUN: {name}: {message}")
        self.name = name
        self.board_message = message


class BoardRebooted(BoardLinkError):
    """A BANNER where none belongs: the board reset (power, brown-out, watchdog, crash)."""


def open_serial(port: str, baud: int) -> SerialPort:
    """pyserial's port for a device path or URL (socket://, rfc2217://, loop://), locked against a second user."""
    return serial.serial_for_url(port, baudrate=baud, timeout=READ_SLICE_S, write_timeout=5, exclusive=True)


def port_error(port: str, baud: int, exc: OSError) -> BoardLinkError:
    """The user's words for a port that does not open."""
    code = exc.errno
    if code in (errno.EACCES, errno.EPERM):
        hint = "add yourself to the dialout group (sudo usermod -aG dialout $USER), then log in again"
    elif code in (errno.EBUSY, errno.EAGAIN, errno.EWOULDBLOCK):
        hint = "another program holds the port: close the serial monitor (testbed firmware monitor, pio device " \
               "monitor, screen, minicom) and try again"
    elif code == errno.ENOENT:
        hint = "no such port: is the board plugged in? (ls /dev/ttyUSB* /dev/ttyACM*)"
    else:
        hint = None
    return BoardLinkError(f"cannot open serial port {port} at {baud} Bd: {exc}", hint=hint)


class BoardLink:
    def __init__(self, port: str, *, baud: int = DEFAULT_BAUD,
                 opener: Callable[[str, int], SerialPort] = open_serial, clock: Clock = REAL_CLOCK,
                 transcript_lines: int = 5000, wire: list[str] | None = None) -> None:
        self.port = port
        self.baud = baud
        self.banner: Banner | None = None
        self.transcript: deque[str] = deque(maxlen=transcript_lines)  # "> sent" / "< received", redacted
        # ``wire``: every line both ways UNREDACTED, for the protocol's own tests (a golden transcript pins the
        # RUN chunks byte for byte). It holds secrets, so the product never passes one and nothing writes it.
        self._wire = wire
        self._opener = opener
        self._clock = clock
        self._ser: SerialPort | None = None
        self._buf = bytearray()
        self.last_text = ""  # the raw text of the last line read

    @property
    def where(self) -> str:
        return f"{self.port} ({self.baud} Bd)"

    def open(self) -> None:
        try:
            self._ser = self._opener(self.port, self.baud)
        except (serial.SerialException, OSError) as exc:
            raise port_error(self.port, self.baud, exc) from exc

    def close(self) -> None:
        if self._ser is not None:
            self._ser.close()
            self._ser = None

    def __enter__(self) -> BoardLink:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def evidence(self, lines: int = 25) -> str:
        return "\n".join(list(self.transcript)[-lines:]) or "(the board printed nothing)"

    # ------------------------------------------------------------------ bytes and lines
    def _port(self) -> SerialPort:
        if self._ser is None:
            raise BoardLinkError(f"serial port {self.port} is not open")
        return self._ser

    def _record(self, line: str) -> None:
        self.transcript.append(redact(line))
        if self._wire is not None:
            self._wire.append(line)

    def write_line(self, text: str) -> None:
        self._record(f"> {text}")
        try:
            self._port().write(text.encode("ascii") + b"\n")
            self._port().flush()
        except (serial.SerialException, OSError) as exc:
            raise BoardLinkError(f"writing to the board on {self.where} failed: {exc} (unplugged?)") from exc

    def read_text(self, timeout_s: float) -> str | None:
        """The next line the board printed, or None when none came within timeout_s."""
        deadline = self._clock.now() + timeout_s
        while b"\n" not in self._buf:
            if self._clock.now() >= deadline:
                return None
            try:
                ser = self._port()
                data = ser.read(max(1, ser.in_waiting))
            except (serial.SerialException, OSError) as exc:
                raise BoardLinkError(f"the board on {self.where} went away: {exc} (unplugged?)",
                                     evidence=self.evidence()) from exc
            self._buf += data
        raw, _, rest = self._buf.partition(b"\n")
        self._buf = bytearray(rest)
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        self._record(f"< {text}")
        self.last_text = text
        return text

    def read_line(self, timeout_s: float) -> BoardLine | None:
        text = self.read_text(timeout_s)
        return None if text is None else parse_line(text)

    # ------------------------------------------------------------------ protocol steps
    def _note_banner(self, banner: Banner) -> None:
        if banner.proto != p.VERSION:
            raise p.VersionMismatch(banner.proto, self.where)
        self.banner = banner

    def reset(self, hold_s: float = 0.1) -> None:
        """Reset the board as esptool's hard reset does: RTS pulls EN low for ``hold_s`` with DTR (GPIO0)
        released, so it boots the flashed firmware; a fresh BANNER and READY follow (wait_ready)."""
        ser = self._port()
        self._record("> (reset: RTS low-high)")
        try:
            ser.dtr = False  # type: ignore[attr-defined]
            ser.rts = True  # type: ignore[attr-defined]
            self._clock.sleep(hold_s)
            ser.rts = False  # type: ignore[attr-defined]
        except (serial.SerialException, OSError, AttributeError) as exc:
            raise BoardLinkError(f"cannot reset the board on {self.where} through DTR/RTS: {exc}",
                                 hint="a port without modem control lines (a pseudo-terminal, some USB adapters) "
                                      "cannot reset the board: leave out --reset-board") from exc
        self._buf.clear()

    def wait_ready(self, timeout_s: float = 90.0, hello_after_s: float = 1.5) -> Banner:
        """BANNER then READY (a board in its MQ-2 warm-up takes a minute); the version is checked."""
        self.banner = None
        quiet_since = [self._clock.now()]
        last_hello: list[float | None] = [None]

        def step() -> Banner | None:
            line = self.read_line(READ_SLICE_S * 2)
            now = self._clock.now()
            if line is None:
                due = last_hello[0] is None or now - last_hello[0] >= 4 * hello_after_s
                if self.banner is None and now - quiet_since[0] >= hello_after_s and due:
                    self.write_line(p.CMD_HELLO)
                    last_hello[0] = now
                return None
            quiet_since[0] = now
            if isinstance(line, Banner):
                self._note_banner(line)
            elif isinstance(line, Ready) and self.banner is not None:
                return self.banner
            return None

        return wait_until(step, timeout_s, interval_s=0, clock=self._clock,
                          describe=f"no BANNER and READY from the board on {self.where}",
                          hint="check the port and the baud rate; press EN to reset the board; is the testbed "
                               f"firmware on it? ({p.REFLASH})",
                          evidence=self.evidence)

    def _expect(self, accept: Callable[[BoardLine], bool], what: str, timeout_s: float) -> BoardLine:
        """Lines up to the one ``accept`` takes; ERROR raises BoardRunRefused (after its READY)."""
        while True:
            line = self.read_line(timeout_s)
            if line is None:
                raise BoardLinkError(f"no {what} from the board on {self.where} within {timeout_s:g} s",
                                     evidence=self.evidence())
            if accept(line):
                return line
            if isinstance(line, Banner):
                self._note_banner(line)
                raise BoardRebooted(f"the board on {self.where} reset while waiting for {what}",
                                    evidence=self.evidence())
            if isinstance(line, BoardError):
                self._expect(lambda x: isinstance(x, Ready), "READY after ERROR", timeout_s)
                raise BoardRunRefused(line.name, line.message, self.where)

    def _ack(self, what: str, index: int | None = None, run_id: str | None = None) -> Callable[[BoardLine], bool]:
        return lambda x: isinstance(x, Ack) and x.what == what and x.index == index and x.run_id == run_id

    def send_run(self, cell: p.RunCell, timeout_s: float = 5.0) -> p.RunFrames:
        """Sends the RUN line by line, each answered by its ACK; returns once the board ACKed the run."""
        if self.banner is None:
            raise BoardLinkError(f"send_run before wait_ready on {self.where}")
        frames = p.encode_run(cell, self.banner.rx_buf)
        self.send_frames(frames, cell.id, timeout_s)
        return frames

    def send_frames(self, frames: p.RunFrames, run_id: str, timeout_s: float = 5.0) -> None:
        """BEGIN, each chunk after the previous one's ACK, END; ERROR raises BoardRunRefused."""
        self.write_line(frames.begin)
        self._expect(self._ack(p.ACK_BEGIN), "ACK begin", timeout_s)
        for i, chunk in enumerate(frames.chunks):
            self.write_line(chunk)
            self._expect(self._ack(p.ACK_CHUNK, index=i), f"ACK chunk i={i}", timeout_s)
        self.write_line(frames.end)
        self._expect(self._ack(p.ACK_RUN, run_id=run_id), f"ACK run id={run_id}", timeout_s)

    def run_lines(self, idle_timeout_s: float) -> Iterator[BoardLine]:
        """The run's lines after ACK run, up to (not including) the READY that ends it.

        The last one is DONE or ERROR. A BANNER raises BoardRebooted; ``idle_timeout_s`` bounds the
        silence between two lines (a run prints one MSG per interval)."""
        while True:
            line = self.read_line(idle_timeout_s)
            if line is None:
                raise BoardLinkError(f"the board on {self.where} printed nothing for {idle_timeout_s:g} s "
                                     "during a run", evidence=self.evidence())
            if isinstance(line, Ready):
                return
            if isinstance(line, Banner):
                self._note_banner(line)
                raise BoardRebooted(f"the board on {self.where} reset during the run", evidence=self.evidence())
            yield line
