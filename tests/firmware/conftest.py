"""Fixtures of the firmware host tests (defined in fwtest_support and board_emu_support)."""

from board_emu_support import board_emu  # noqa: F401
from fwtest_support import broker_factory, build36, host_build, pki  # noqa: F401
