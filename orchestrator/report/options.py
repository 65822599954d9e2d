"""What a report is built with: the baseline, the bootstrap's seed and resamples, the grading tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.analysis import grading, stats
from orchestrator.errors import TestbedError

DEFAULT_BASELINE = "plain"
GradingTable = grading.IndexTable | grading.PassFailTable


@dataclass(frozen=True)
class ReportOptions:
    baseline: str
    seed: int
    resamples: int
    tables: tuple[GradingTable, ...]


def bootstrap_seed(manifest: dict[str, Any]) -> int:
    """The sweep's recorded seed, or stats.DEFAULT_SEED when the manifest has none."""
    seed = manifest.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else stats.DEFAULT_SEED


def grading_tables(extra: Sequence[Path]) -> tuple[GradingTable, ...]:
    """The built-in tables, then the user's; a name used twice is an error naming both files."""
    tables = [*grading.builtin_tables(), *(grading.load_table(Path(p)) for p in extra)]
    seen: dict[str, str] = {}
    for table, origin in zip(tables, [*grading.BUILTIN_TABLES, *map(str, extra)], strict=True):
        if table.name in seen:
            raise TestbedError(
                f"{origin}: grading table name {table.name!r} is already used by {seen[table.name]}",
                hint="give your table another name",
            )
        seen[table.name] = origin
    return tuple(tables)


def report_options(
    manifest: dict[str, Any], *, baseline: str | None, extra_tables: Sequence[Path], resamples: int
) -> ReportOptions:
    return ReportOptions(
        baseline=baseline or DEFAULT_BASELINE,
        seed=bootstrap_seed(manifest),
        resamples=resamples,
        tables=grading_tables(extra_tables),
    )
