"""The impairment of one cell: where the profile acts, applied for the block and always cleared, the delay line
watched while the cell runs; its state before, during and after written to the run folder's impairment.json."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.backends import compose, docker
from orchestrator.backends.docker import Container
from orchestrator.backends.impairment import (
    ImpairmentRecord,
    ImpairmentTarget,
    PlanCommand,
    dropped_packets,
    impaired,
    line_health,
    router,
    targets_for_containers,
)
from orchestrator.backends.impairment.board import board_targets, where_on_board_path
from orchestrator.backends.impairment.helpers import containers_of
from orchestrator.backends.impairment.models import helper_name
from orchestrator.model.axes import AXES
from orchestrator.model.impairment import Impairment
from orchestrator.model.layout import Layout
from orchestrator.results.atomic import write_json_atomic
from orchestrator.waiting import throttled


def impairment_targets(impairment: Impairment, mechanism: str | None = None,
                       board: bool = False) -> tuple[list[ImpairmentTarget], list[PlanCommand]]:
    """Where the profile acts: the publisher's link, the broker->subscriber link, or both; with the
    userspace delay line (``queue``) the publisher's link through the router, and the routes to it; for
    a board, its packets at the broker's ingress."""
    names = {role: compose.container_name(role) for role in ("publisher", "broker", "subscriber", "router")}
    if board:
        return board_targets(impairment, names), []
    if mechanism == "queue":
        path = router.router_path(names["publisher"], names["broker"], names["router"])
        targets = router.queue_targets(path, correlated_loss=bool(impairment.loss_correlation_pct))
        return targets, router.route_setup(path)
    return targets_for_containers(impairment.direction, names), []


class LineWatch:
    """The delay line's health while the cell runs (queue mechanism); the first problem it saw. Checked
    every ``every_s``: each check is a `docker exec`, whose CPU the line would otherwise lose on a small
    host (its releases came later with a check every second)."""

    def __init__(self, impairment: Impairment, targets: list[ImpairmentTarget], every_s: float = 5.0) -> None:
        self.impairment, self.targets = impairment, targets
        self.problem: str | None = None
        self._check = throttled(self._look, every_s)

    def _look(self) -> bool:
        self.problem = line_health(self.impairment, self.targets)
        return self.problem is not None

    def broken(self) -> bool:
        return self.problem is not None or self._check()

    def helpers(self) -> list[Container]:
        """The impairment helpers of the impaired containers as they are now (the delay line runs in the router's):
        none without an impairment, and no engine call then."""
        return docker.inspect_containers([helper_name(c) for c in containers_of(self.targets)])


@contextmanager
def impairment_applied(impairment: Impairment, lay: Layout, mechanism: str | None = None,
                       seed: int = AXES["seed"].default, board: bool = False,
                       targets: list[ImpairmentTarget] | None = None,
                       inventory: Path | None = None) -> Iterator[LineWatch]:
    """Apply the profile for the block and ALWAYS clear it; tc/nft state before, during and after is
    written to impairment.json in the run folder (with the delay mechanism and the line's stats; for a
    board, where on its path the profile acted and what the capture sees of it). ``targets`` and
    ``inventory``: a lab's router hosts (measure/multihost.py) instead of this host's containers."""
    record_path = lay.impairment
    if impairment.is_noop:
        write_json_atomic(record_path, {"profile": impairment.name, "applied": False, "delay_mechanism": None,
                                        "note": "no impairment: nothing applied, nothing to clear"})
        yield LineWatch(impairment, [])
        return
    targets, setup = (targets, []) if targets is not None else impairment_targets(impairment, mechanism, board)
    where = {"board_path": where_on_board_path(impairment, str(targets[0].source_outside))} if board else {}
    record: ImpairmentRecord | None = None
    try:
        with impaired(impairment, targets, mechanism=mechanism or "netem", seed=seed, setup=setup,
                      inventory=inventory) as record:
            write_json_atomic(record_path, {"profile": impairment.name, "applied": True, **where,
                                            **record.model_dump(mode="json")})
            yield LineWatch(impairment, targets)
    finally:  # also after Ctrl-C or a failed cell: the state at the end and after the clear are kept
        if record is not None:
            write_json_atomic(record_path, {"profile": impairment.name, "applied": True, **where,
                                            "dropped_packets": dropped_packets(record.before_clear or ""),
                                            "delay_line": router.line_stats(record.before_clear or ""),
                                            **record.model_dump(mode="json")})


