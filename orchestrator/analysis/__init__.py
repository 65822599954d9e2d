"""Capture + application logs -> per-packet and per-message tables -> the metrics of MEASUREMENT.md.

Pure: analysis starts no program. ``analyse_run`` is handed a ``fields.FieldExporter`` (the tshark
one is ``orchestrator.backends.tshark.export_chunks``) and reads the text it gives back.

Entry points (imported lazily so ``orchestrator.analysis.stats`` stays light):
``RunInputs``, ``RunAnalysis``, ``analyse_run``, ``write_run_outputs`` from ``pipeline``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunAnalysis", "RunInputs", "analyse_run", "write_run_outputs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from orchestrator.analysis import pipeline
        return getattr(pipeline, name)
    raise AttributeError(name)
