"""Run a command with SIGINT at its default: `python scripts/sigint-default.py CMD ARGS...`.

A shell starts a background job (`cmd &`, as `make test` starts the tests not marked docker) with SIGINT ignored, and
an ignored signal stays ignored in every program started from it: the tests that stop a device, a board emulator or
the CLI with Ctrl-C would find it ignored. A default disposition is inherited as the default instead.
"""

from __future__ import annotations

import os
import signal
import sys

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: sigint-default.py CMD [ARGS...]")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
