"""The results format: schema versions and migrations (schema), the bundle's manifest and resume (manifest),
archive/verify (archive), atomic writes (atomic), the one reader of a bundle's run folders (bundle) and the
notebook API over it (notebook: ``from orchestrator.results import load``, docs/notebook.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.results.notebook import ResultsBundle, load

__all__ = ["ResultsBundle", "load"]


def __getattr__(name: str) -> Any:
    """``load`` and ``ResultsBundle`` are imported when first asked for: the rest of results/ (the CLI's
    writers) does not need pandas."""
    if name in __all__:
        from orchestrator.results import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
