"""The one user-facing error type.

Expected failures (bad input, a missing tool, a daemon that does not answer) raise
:class:`TestbedError`. The CLI catches it in one place, prints one line (plus an optional
hint and evidence) and exits non-zero; ``--debug`` shows the traceback. What it carries is redacted
when it is made (orchestrator/redact.py): no password, private key or key-log line reaches the terminal.
"""

from __future__ import annotations

from orchestrator.redact import redact, redact_optional


class TestbedError(Exception):
    """An expected failure the user can act on."""

    __test__ = False  # not a pytest test class

    def __init__(self, message: str, *, hint: str | None = None, evidence: str | None = None,
                 exit_code: int = 1) -> None:
        message = redact(message)
        super().__init__(message)
        self.message = message
        self.hint = redact_optional(hint)
        self.evidence = redact_optional(evidence)
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class ToolError(TestbedError):
    """An external program failed. Carries the argv, exit code, stdout and stderr."""

    def __init__(self, argv: list[str], returncode: int | None, stdout: str, stderr: str,
                 *, message: str | None = None, hint: str | None = None) -> None:
        tail = (stderr or stdout).strip().splitlines()[-15:]
        msg = message or f"{argv[0]} failed (exit {returncode}): {' '.join(argv)}"
        super().__init__(msg, hint=hint, evidence="\n".join(tail) or None)
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
