"""A real board (the ESP32) or board-emu as the publisher, driven over its serial port.

`protocol` (constants, RUN encoding, errors) and `lines` (board lines -> dataclasses) are pure code,
mirroring firmware/platformio/lib/testbed_core/src/board_protocol.h; `link` is the serial port.
"""

from orchestrator.publishers.board.protocol import VERSION, BoardProtocolError, RunCell, VersionMismatch

__all__ = ["VERSION", "BoardProtocolError", "RunCell", "VersionMismatch"]
