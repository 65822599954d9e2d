"""Where a cell runs, chosen once from the run's spec (site_for): this host (measure/local.py) or the hosts of a lab
inventory (measure/multihost.py). The cell's lifecycle (measure/run.py, measure/sweep.py) is written against this
interface and never asks which site it has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from orchestrator.lab.keptlab import KeptLab
from orchestrator.measure.cell import CellWriter, Observed
from orchestrator.measure.local import ThisHost
from orchestrator.measure.multihost import LabSite
from orchestrator.model.impairment import Impairment
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers.variants import Variant
from orchestrator.runanalysis.analyse import MoreMetrics


class Site(Protocol):
    name: str
    fresh_lab_reason: str | None  # why its cells cannot share a kept-up lab (None: they can, within a block)

    @property
    def more_metrics(self) -> MoreMetrics | None: ...  # what the site adds to a run folder's metrics

    def preflight(self, spec: RunSpec, variant: Variant) -> Impairment: ...  # before anything starts
    def check_profile(self, impairment: str, mechanism: str) -> None: ...  # a sweep's profile (a name), early
    def measure(self, scenario: Scenario, spec: RunSpec, variant: Variant, impairment: Impairment,
                record: CellWriter, progress: Callable[[int, int], None],
                status: Callable[[str], None],
                lab: KeptLab | None = None) -> Observed: ...  # the cell (in ``lab``: a block's), torn down after
    def environment(self) -> dict[str, Any]: ...  # the manifest's "environment"
    def manifest(self, plan: SweepPlan, bundle: Path) -> dict[str, Any]: ...  # what else the manifest records


def site_for(inventory: str | None) -> Site:
    """The one place a run's site is chosen: a lab inventory's hosts when the run names one, else this host."""
    return ThisHost() if inventory is None else LabSite(Path(inventory))
