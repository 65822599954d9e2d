"""Stop signals: SIGTERM and SIGHUP mean what Ctrl-C (SIGINT) means, for every command; cleanup that must finish
holds all three back and delivers them afterwards (a second signal during cleanup does not abandon it)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# SIGINT: Ctrl-C; SIGTERM: `kill`, `docker stop`, a CI or systemd timeout; SIGHUP: the terminal closed (ssh lost)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def install_stop_signals() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as SIGINT does: one path tears down for all three."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    # Python leaves SIGINT ignored when the program was started so (a background job of a script, nohup): Ctrl-C
    # and `kill -INT` still mean stop here, as they do for every command
    signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted_by(exc: KeyboardInterrupt) -> str:
    """A cell's error for ``exc``, naming the signal that stopped it (Python's own Ctrl-C handler names none)."""
    name = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "SIGINT"
    return f"interrupted by the user ({name})"


@contextmanager
def stop_signals_held(pending: list[int]) -> Iterator[None]:
    """Within the block a stop signal is only noted in ``pending``; the previous handlers come back after it.
    Off the main thread (where handlers cannot be set) nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, _frame: pending.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Cleanup that must finish: Ctrl-C, SIGTERM and SIGHUP during it are held back and become one
    KeyboardInterrupt afterwards."""
    pending: list[int] = []
    with stop_signals_held(pending):
        yield
    if pending:
        raise KeyboardInterrupt(signal.Signals(pending[0]).name)
