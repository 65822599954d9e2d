"""Publishers: what sends the samples of one run. `virtual` is the vdevice container (the ESP32 firmware's
portable core built for the host); a real ESP32 over its serial port joins it with the same methods."""

from __future__ import annotations

from typing import Protocol

from orchestrator.backends.compose import Topology


class Publisher(Protocol):
    @property
    def service(self) -> str: ...  # the compose service whose container state and log are its own
    def start(self, topo: Topology) -> None: ...  # started; it waits for go()
    def go(self) -> None: ...  # publish now (after the impairment is applied)
    def wait_exit(self, timeout_s: float) -> int | None: ...  # exit code, None while still running
    def error(self) -> str: ...  # why it failed, in its own words
    def stop(self) -> None: ...  # end a run still going (a failed cell, Ctrl-C); nothing when it ended
