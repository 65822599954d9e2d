"""A sweep cell's analysis beside the next cell's setup (measure/sweep.py, lab/keptlab.py).

In a kept-up lab a cell's analysis (tshark's export, the tables, metrics.json: about 0.3 s for a small cell) needs
nothing of the lab: it runs in a thread while the next cell restarts the broker process and starts its clients, and
is waited for before that cell's publisher is told to go, so no measurement runs beside it. It is also waited for
before a cell on a fresh lab and when the sweep ends, Ctrl-C included: a finished measurement is analysed and
recorded (the wait holds stop signals back, as other cleanup that must finish does; tshark runs in its own session,
so the terminal's Ctrl-C does not reach it). The cell's ending (its manifest entry, its progress line) is done by the
thread that waits, the sweep's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from orchestrator.errors import TestbedError
from orchestrator.measure.run import RunOutcome
from orchestrator.signals import sigint_deferred


class AnalysisBeside:
    """At most one cell's analysis in flight, and what ends that cell once it is done."""

    def __init__(self) -> None:
        self._pending: tuple[Future[RunOutcome], Callable[[RunOutcome | None, BaseException | None], None]] | None \
            = None

    def start(self, analysis: Callable[[], RunOutcome],
              then: Callable[[RunOutcome | None, BaseException | None], None]) -> None:
        """Run ``analysis`` in a thread (after the one before it is settled); ``then`` gets its outcome, or what it
        raised, in the thread that settles it."""
        self.settle()
        done: Future[RunOutcome] = Future()

        def run() -> None:
            try:
                done.set_result(analysis())
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that settles it
                done.set_exception(exc)

        threading.Thread(target=run, name="cell-analysis", daemon=False).start()
        self._pending = (done, then)

    def settle(self) -> None:
        """Wait for the analysis in flight (stop signals held meanwhile) and end its cell; nothing when none is.
        A TestbedError is the cell's failure (``then`` records it); anything else it raised (a bug) is raised here,
        after its cell was ended."""
        if self._pending is None:
            return
        done, then = self._pending
        self._pending = None
        with sigint_deferred():  # a stop signal meanwhile is raised once the cell is ended
            error = done.exception()
            then(None if error is not None else done.result(), error)
        if error is not None and not isinstance(error, TestbedError):
            raise error
