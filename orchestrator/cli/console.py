"""Shared rich consoles: results on stdout, progress and errors on stderr.

Text that comes from the user or the outside world (paths, messages, evidence) is escaped before it is
printed with markup, so `[...]` in a path is printed as it is.

Piped output (CI logs, `| tee`) gets 160 columns instead of rich's 80 so tables stay readable.
"""

import sys

from rich.console import Console
from rich.markup import escape

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 160)


def progress_line(message: str) -> None:
    """A dim progress line on stderr; the message is printed literally (a path with [brackets] is no markup)."""
    err.print(f"[dim]{escape(message)}[/]", highlight=False)
