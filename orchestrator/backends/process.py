"""The one way external programs are run: argv lists, never shell strings.

``run()`` waits for a program and returns its whole output; ``stream()`` hands its stdout over
block by block WHILE it runs (for outputs worth processing as they come). A program is looked up
on PATH, then in the sbin folders (:data:`SBIN_DIRS`, off an ordinary user's PATH). Every failure becomes a
:class:`~orchestrator.errors.ToolError` carrying argv, exit code, stdout and stderr; a missing
program becomes a clear :class:`TestbedError`.
"""

from __future__ import annotations

import fcntl
import math
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from orchestrator.errors import TestbedError, ToolError

PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size: what an unprivileged process may ask for
# blocks of at most 1 MiB read ahead of a consumer that lags (a busy host): beyond, the program waits, so what
# is not parsed yet is not all held here (a fleet's export is 300 MB of text)
QUEUED_BLOCKS = 16

DEFAULT_HINT = "run `testbed doctor` to see what is missing and how to install it"


# Searched after PATH: tc, nft, ip, setcap (and dumpcap on some distributions) live here, and an
# ordinary user's PATH on Debian does not include them.
SBIN_DIRS: tuple[str, ...] = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def which(program: str) -> str | None:
    """The full path of ``program``: PATH first, then :data:`SBIN_DIRS`; None when neither has it."""
    found = shutil.which(program)
    if found is not None or os.sep in program:
        return found
    for folder in SBIN_DIRS:
        found = shutil.which(program, path=folder)
        if found is not None:
            return found
    return None


def _executable(argv: Sequence[str], env: Mapping[str, str] | None) -> str | None:
    """What to execute for ``argv`` when its program is found only in :data:`SBIN_DIRS`, else None.

    The program is started through the PATH the child gets (as subprocess does) when it is there,
    so argv and the behaviour for programs on PATH stay unchanged.
    """
    if not argv:
        return None
    program = argv[0]
    if os.sep in program or shutil.which(program, path=os.pathsep.join(os.get_exec_path(env))):
        return None
    found = which(program)
    return found if found is not None and os.path.isabs(found) else None


def _full_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    full_env = dict(os.environ)
    full_env.update(env)
    return full_env


def _not_found(argv: Sequence[str], hint: str | None) -> TestbedError:
    return TestbedError(f"program not found: {argv[0]}", hint=hint or DEFAULT_HINT)


def _timed_out(argv: list[str], timeout: float | None, out: str, err: str, hint: str | None) -> ToolError:
    return ToolError(argv, None, out, err, message=f"{argv[0]} timed out after {timeout:g} s: {' '.join(argv)}",
                     hint=hint)


def run(argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
        env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
        input_text: str | None = None, hint: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and capture its output as text.

    Raises ToolError when ``check`` and the exit code is non-zero or the timeout expires;
    TestbedError when the program does not exist.
    """
    argv = [str(a) for a in argv]
    full_env = _full_env(env)
    try:
        proc = subprocess.run(argv, executable=_executable(argv, full_env), capture_output=True, text=True,
                              timeout=timeout, env=full_env, cwd=cwd, input=input_text,
                              stdin=None if input_text is not None else subprocess.DEVNULL, check=False)
    except FileNotFoundError as exc:
        raise _not_found(argv, hint) from exc
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise _timed_out(argv, timeout, out, err, hint) from exc
    if check and proc.returncode != 0:
        raise ToolError(argv, proc.returncode, proc.stdout, proc.stderr, hint=hint)
    return proc


class _Expired(Exception):
    """The deadline of a streamed program passed (turned into a ToolError by ``stream``)."""


class OutputStream:
    """The stdout of a program started by :func:`stream`; ``returncode`` and ``stderr`` are set on exit."""

    def __init__(self, argv: list[str], proc: subprocess.Popen[bytes], timeout: float | None) -> None:
        self.argv = argv
        self.returncode: int | None = None
        self.stderr = ""
        self._proc = proc
        self._deadline = math.inf if timeout is None else time.monotonic() + timeout
        self._blocks: queue.Queue[bytes] = queue.Queue(maxsize=QUEUED_BLOCKS)
        _widen(proc.stdout)
        # a reader thread drains the pipe so the program never waits on the consumer
        self._reader = threading.Thread(target=_drain, args=(proc.stdout, self._blocks), daemon=True)
        self._reader.start()

    def blocks(self) -> Iterator[bytes]:
        """Every block of output, as soon as it is read, until the program closes its stdout."""
        while True:
            try:
                block = self._blocks.get(timeout=max(0.0, min(1.0, self._deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= self._deadline:
                    raise _Expired from None
                continue
            if not block:
                return
            yield block

    def _wait(self) -> int:
        left = self._deadline - time.monotonic()
        try:
            return self._proc.wait(timeout=None if math.isinf(left) else max(1.0, left))
        except subprocess.TimeoutExpired:
            raise _Expired from None

    def _stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        deadline = time.monotonic() + 5
        while self._reader.is_alive() and time.monotonic() < deadline:  # blocked on a full queue: emptied
            try:
                self._blocks.get_nowait()
            except queue.Empty:
                self._reader.join(timeout=0.05)


def _widen(pipe: IO[bytes] | None) -> None:
    """The pipe's buffer from 64 KiB to :data:`PIPE_BYTES`: the reader thread runs only when the consumer's
    thread lets go of the GIL (every few ms in pandas' parsing), and a 64 KiB pipe holds a few ms of tshark's
    output, so the program stalled on a full pipe (a no-op where it cannot be done)."""
    if pipe is None:
        return
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):
        pass


def _drain(pipe: IO[bytes], blocks: queue.Queue[bytes]) -> None:
    try:
        while True:
            block = pipe.read1(1 << 20)  # type: ignore[attr-defined]
            blocks.put(block)
            if not block:
                return
    finally:
        pipe.close()


def _read_back(err: IO[bytes]) -> str:
    err.seek(0)
    return err.read().decode("utf-8", errors="replace")


@contextmanager
def stream(argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
           env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
           hint: str | None = None) -> Iterator[OutputStream]:
    """Start ``argv`` and yield its stdout (:meth:`OutputStream.blocks`) while it runs.

    Leaving the block waits for the program (it is killed when the block is left by an exception)
    and sets ``returncode`` and ``stderr``. Raises ToolError when the timeout (counted from the
    start) expires, or on exit when ``check`` and the exit code is non-zero; TestbedError when
    the program does not exist.
    """
    argv = [str(a) for a in argv]
    with tempfile.TemporaryFile() as err:
        try:
            full_env = _full_env(env)
            # its own session: the terminal's Ctrl-C reaches this process alone, which kills the program when the
            # block is left by the interrupt; a sweep's cell analysed beside the next cell (measure/overlap.py) ends
            proc = subprocess.Popen(argv, executable=_executable(argv, full_env), stdout=subprocess.PIPE,
                                    stderr=err, stdin=subprocess.DEVNULL, env=full_env, cwd=cwd,
                                    start_new_session=True)
        except FileNotFoundError as exc:
            raise _not_found(argv, hint) from exc
        out = OutputStream(argv, proc, timeout)
        try:
            yield out
            out.returncode = out._wait()
        except _Expired:
            out._stop()
            raise _timed_out(argv, timeout, "", _read_back(err), hint) from None
        finally:
            out._stop()
            out.stderr = _read_back(err)
    if check and out.returncode != 0:
        raise ToolError(argv, out.returncode, "", out.stderr, hint=hint)
