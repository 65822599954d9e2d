"""Shared rich consoles: results on stdout, progress and errors on stderr."""

from rich.console import Console

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
