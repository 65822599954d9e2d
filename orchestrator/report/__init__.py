"""Derived files of a results bundle: summary.csv, comparisons.csv, plots, report.md, report.html.

Everything here is rebuilt from runs/*/ and manifest.json alone by :func:`build_report`. It is looked up when
first asked for (PEP 562), not when the package is: a module that needs one small piece of report/ (the CLI's
render.py) does not pay for matplotlib and every section (about 1 s of a command's start).
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_report"]


def __getattr__(name: str) -> Any:
    if name == "build_report":
        from orchestrator.report.build import build_report

        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
