"""firmware/platformio/lib/testbed_core/src/device_options.def as the firmware tests read it: the orchestrator's own
reader (orchestrator/publishers/board/protocol_def.py, which the board protocol's RUN keys come from), with the path
of this checkout's .def."""

from __future__ import annotations

from pathlib import Path

from fwtest_support import REPO

from orchestrator.publishers.board.protocol_def import DEF_IN_REPO, DefOption, board_options, read_def

DEF = REPO / DEF_IN_REPO
__all__ = ["DEF", "DefOption", "board_keys", "read_def"]


def board_keys(path: Path = DEF) -> tuple[str, ...]:
    """The RUN body keys: the entries the board takes, in file order."""
    return tuple(o.name for o in board_options(path))
