"""Shared rich consoles: results on stdout, progress and errors on stderr.

Piped output (CI logs, `| tee`) gets 160 columns instead of rich's 80 so tables stay readable.
"""

import sys

from rich.console import Console

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 160)
