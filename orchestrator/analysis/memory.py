"""The analysis' peak memory (a 1.5M-packet capture: ~1 GB of tables at once, next to tshark's own)."""

from __future__ import annotations

import ctypes


def give_back_freed_memory() -> None:
    """Hand the memory freed so far back to the system: glibc keeps freed heap pages for reuse, and after the
    chunks' tables of a 1.5M-packet capture are put together that is ~300 MB that later large arrays (each
    mapped afresh) never reuse. Only the peak memory changes, nothing computed; a no-op without glibc."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
