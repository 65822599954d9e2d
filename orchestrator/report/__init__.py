"""Derived files of a results bundle: summary.csv, comparisons.csv, plots, report.md, report.html.

Everything here is rebuilt from runs/*/ and manifest.json alone by :func:`build_report`.
"""

from orchestrator.report.build import build_report

__all__ = ["build_report"]
