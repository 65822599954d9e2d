"""process.stream(): a program's stdout while it runs, with run()'s error semantics."""

from __future__ import annotations

import os
import sys
import time

import pytest

from orchestrator.backends.process import stream
from orchestrator.errors import TestbedError, ToolError

PY = sys.executable


def test_output_arrives_while_the_program_still_runs() -> None:
    code = "import sys, time; sys.stdout.write('first\\n'); sys.stdout.flush(); time.sleep(1.5); print('second')"
    arrived: list[tuple[float, bytes]] = []
    t0 = time.monotonic()
    with stream([PY, "-c", code], timeout=30) as out:
        for block in out.blocks():
            arrived.append((time.monotonic() - t0, block))
    assert b"".join(b for _, b in arrived) == b"first\nsecond\n"
    assert arrived[0][1] == b"first\n" and arrived[0][0] < 1.2  # before the program's sleep ended
    assert out.returncode == 0 and out.stderr == ""


def test_a_non_zero_exit_is_a_tool_error_with_stderr_when_checked() -> None:
    code = "import sys; print('out'); sys.stderr.write('it broke\\n'); sys.exit(3)"
    with pytest.raises(ToolError) as err, stream([PY, "-c", code], hint="try again") as out:
        assert b"".join(out.blocks()) == b"out\n"
    assert err.value.returncode == 3 and err.value.stderr == "it broke\n"
    assert err.value.evidence == "it broke" and err.value.hint == "try again"


def test_unchecked_the_exit_code_and_stderr_are_left_to_the_caller() -> None:
    code = "import sys; sys.stderr.write('cut short\\n'); sys.exit(2)"
    with stream([PY, "-c", code], check=False) as out:
        assert list(out.blocks()) == []
    assert (out.returncode, out.stderr) == (2, "cut short\n")


def test_a_missing_program_is_a_clear_error() -> None:
    with pytest.raises(TestbedError, match="program not found: no-such-program-here") as err, \
            stream(["no-such-program-here"], hint="install it"):
        pass
    assert not isinstance(err.value, ToolError) and err.value.hint == "install it"


def test_a_timeout_kills_the_program_and_keeps_its_stderr() -> None:
    code = "import sys, time; sys.stderr.write('waiting\\n'); sys.stderr.flush(); time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 2 s") as err, stream([PY, "-c", code], timeout=2) as out:
        list(out.blocks())
    assert time.monotonic() - t0 < 10
    assert err.value.returncode is None and err.value.stderr == "waiting\n"
    assert out.returncode is None


def test_leaving_early_kills_the_program() -> None:
    code = "import os, time\nprint(os.getpid(), flush=True)\nwhile True: time.sleep(0.01)"
    pid = None
    with pytest.raises(RuntimeError, match="consumer gave up"), stream([PY, "-c", code], timeout=30) as out:
        for block in out.blocks():
            pid = int(block)
            raise RuntimeError("consumer gave up")
    assert pid is not None
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(pid, 0)


def test_a_consumer_that_lags_holds_a_bounded_read_ahead_and_leaving_early_is_prompt() -> None:
    """A program writing without end to a consumer that stops reading: what is read ahead of the consumer is
    bounded (the program waits, as it would on a full pipe), and leaving then ends the program and its reader
    thread at once (a reader blocked on the full queue is let go)."""
    import threading

    from orchestrator.backends.process import PIPE_BYTES, QUEUED_BLOCKS

    code = "import sys\nwhile True: sys.stdout.buffer.write(b'x' * 65536)"
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="consumer gave up"), stream([PY, "-c", code], timeout=30) as out:
        for _block in out.blocks():
            time.sleep(1.0)  # the reader fills the queue meanwhile
            queued = out._blocks.qsize()
            t0 = time.monotonic()
            raise RuntimeError("consumer gave up")
    assert queued <= QUEUED_BLOCKS and QUEUED_BLOCKS * (1 << 20) + PIPE_BYTES <= 32 << 20
    assert time.monotonic() - t0 < 2.0
    assert threading.active_count() == before
