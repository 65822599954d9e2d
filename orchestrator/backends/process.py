"""The one way external programs are run: argv lists, never shell strings.

Every failure becomes a :class:`~orchestrator.errors.ToolError` carrying argv, exit code,
stdout and stderr; a missing program becomes a clear :class:`TestbedError`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.errors import TestbedError, ToolError


def which(program: str) -> str | None:
    return shutil.which(program)


def run(argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
        env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
        input_text: str | None = None, hint: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and capture its output as text.

    Raises ToolError when ``check`` and the exit code is non-zero or the timeout expires;
    TestbedError when the program does not exist.
    """
    argv = [str(a) for a in argv]
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env,
                              cwd=cwd, input=input_text, stdin=None if input_text is not None
                              else subprocess.DEVNULL, check=False)
    except FileNotFoundError as exc:
        raise TestbedError(f"program not found: {argv[0]}",
                           hint=hint or "run `testbed doctor` to see what is missing and how to install it"
                           ) from exc
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise ToolError(argv, None, out, err,
                        message=f"{argv[0]} timed out after {timeout:g} s: {' '.join(argv)}",
                        hint=hint) from exc
    if check and proc.returncode != 0:
        raise ToolError(argv, proc.returncode, proc.stdout, proc.stderr, hint=hint)
    return proc
