"""The site "this host": one cell in containers on this machine (compose/testbed.yml).

up (fresh broker, capture, subscriber) -> capture running BEFORE any client connects -> subscriber
subscribed -> publisher started -> wait by COUNTING received messages (or a timeout derived from
N x interval) -> capture stopped with SIGINT (flushes) -> verdict (naming the service that failed
first) -> teardown (always, also on Ctrl-C; every container's log and state saved into logs/ first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.backends import compose, docker
from orchestrator.backends.docker import Container
from orchestrator.backends.docker_stats import StatsSampler
from orchestrator.backends.images import build_on_demand, missing_images
from orchestrator.backends.impairment import check_supported
from orchestrator.backends.process import which
from orchestrator.environment.record import environment, ran_images
from orchestrator.errors import TestbedError
from orchestrator.lab.broker import BROKER
from orchestrator.lab.keptlab import KeptLab, fresh_cell_lab
from orchestrator.lab.topology import TOPIC, wait_for_messages
from orchestrator.measure.cell import CellWriter, Observed
from orchestrator.measure.events import Timeline
from orchestrator.measure.impairment import LineWatch, impairment_applied
from orchestrator.model.brokers import broker_of
from orchestrator.model.impairment import Impairment, load_impairment
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers import Publisher
from orchestrator.publishers.variants import Variant
from orchestrator.results.atomic import read_json
from orchestrator.results.space import check_still_room
from orchestrator.runanalysis.analyse import MoreMetrics
from orchestrator.waiting import throttled

SERVICES_FOR_RUN = compose.SERVICES
# After the publisher's exit, before a cell's capture ends: its last segments (ACKs, DISCONNECT, FIN) reach the
# capture. A fresh lab's capture is stopped then, with any impairment's delay still on the path. A kept-up lab's
# cells are unimpaired on one host (measure/sweep.py keeps no lab up for an impaired one), where the exchange takes
# under a millisecond, and its cut waits for a packet from after the end before it cuts (lab/keptlab.py).
LAST_SEGMENTS_S = 0.3
LAST_SEGMENTS_KEPT_UP_S = 0.05


class ThisHost:
    """The cell's containers on this machine."""

    name = "this host"
    fresh_lab_reason: str | None = None  # a sweep's block keeps its lab up (lab/keptlab.py)

    @property
    def more_metrics(self) -> MoreMetrics | None:
        return None  # the single-host analysis is the whole analysis

    def preflight(self, spec: RunSpec, variant: Variant) -> Impairment:
        """Everything that can be checked before a container starts; the run's impairment profile."""
        variant.check(spec)
        impairment = load_impairment(spec.impairment)
        check_supported(impairment, mechanism=variant.mechanism_to_check(impairment, spec))  # e.g. netem, no kernel
        if which("tshark") is None:
            raise TestbedError("tshark is missing on this host (the analysis needs it)",
                               hint="apt-get install -y tshark")
        docker.engine_version()
        docker.compose_command()
        broker_image = broker_of(spec.values()).image
        build_on_demand(broker_image)  # an image built only when a cell needs it: RabbitMQ's
        missing = missing_images((*SERVICES_FOR_RUN, broker_image))
        if missing:
            raise TestbedError(f"images not built: {', '.join(missing)}", hint="testbed images build")
        return impairment

    def check_profile(self, impairment: str, mechanism: str) -> None:
        """A sweep's profile, before any cell: this kernel can apply it."""
        check_supported(load_impairment(impairment), mechanism=mechanism)

    def measure(self, scenario: Scenario, spec: RunSpec, variant: Variant, impairment: Impairment,
                record: CellWriter, progress: Callable[[int, int], None], status: Callable[[str], None],
                lab: KeptLab | None = None) -> Observed:
        return measure(scenario, spec, variant, impairment, record, progress, status, lab)

    def environment(self) -> dict[str, Any]:
        return environment()

    def manifest(self, plan: SweepPlan, bundle: Path) -> dict[str, Any]:
        return {}


def measure(scenario: Scenario, spec: RunSpec, variant: Variant, impairment: Impairment, record: CellWriter,
            progress: Callable[[int, int], None], status: Callable[[str], None],
            lab: KeptLab | None = None) -> Observed:
    """Up, publisher, impairment, count, stop, verdict; the teardown (which saves every container's log
    and state into logs/) runs before this returns, also when it raises. ``lab``: a sweep block's kept-up lab
    (lab/keptlab.py): only its broker process, the subscriber and the publisher are new for this cell."""
    status(f"{record.cell_id}: " + ("starting broker, capture and subscriber" if lab is None or lab.lay is None
                                    else "restarting the broker process, a new subscriber"))
    # a board's cell: published on the board's address only, with authentication and an ACL (lab/board_side.py)
    exposure = variant.exposure(scenario, spec, TOPIC)
    if exposure is not None:
        record.record.exposure = exposure.facts()
        status(f"{record.cell_id}: {exposure.line()}")
    assert lab is None or exposure is None  # a variant with an exposure keeps no lab up (its lab_kept_up)
    cell_lab = (fresh_cell_lab(scenario, record.lay.root, sub=spec.subscription, exposure=exposure) if lab is None
                else lab.cell(scenario, record.lay.root, sub=spec.subscription))
    with cell_lab as here:
        lay, pki, topo = here.lay, here.pki, here.topo
        record.lap("up")
        mechanism = variant.mechanism(impairment, spec)
        topo, publisher = variant.place(scenario, lay, pki, spec, topo, mechanism, exposure)
        sampler = StatsSampler(BROKER.container(), from_start=lab is not None).start()
        record.set(**variant.with_broker_up(spec))
        publisher.start(topo)
        here.ready()  # subscribed (a kept-up lab's cell before is analysed and ended by then: its line comes first)
        status(f"{record.cell_id}: publishing {spec.samples} x {spec.payload} B{variant.what(spec)}")
        record.lap("publisher_start")
        try:
            with impairment_applied(impairment, lay, mechanism, spec.seed, variant.board_path) as watch:
                record.lap("impair")
                publisher.go()
                events = Timeline(str(spec.values().get("events") or ""), compose.container_name(publisher.service),
                                  status).start()
                try:  # a cell with events loses messages on purpose: counting ends once its publisher has ended
                    seen = Observed(received=count_messages(lay, spec, progress, watch, lambda: variant.ended_early(
                        publisher) or (bool(events) and events.publisher_ended(publisher))))
                finally:
                    if events:
                        record.save(events=events.stop())  # the analysis reads them from cell.json
                record.lap("publish")
                seen.publisher_exit_code = publisher.wait_exit(
                    timeout_s=15 if seen.received >= spec.messages_expected else 2)
                seen.containers = compose.containers()
                ran = [*seen.containers, *watch.helpers()]  # the images it ran, the delay line's too
                time.sleep(LAST_SEGMENTS_S if lab is None else LAST_SEGMENTS_KEPT_UP_S)
                seen.resources = sampler.stop()
                here.end_capture()
            record.record.impairment_state = state = read_json(lay.impairment)
            seen.error = verdict(seen, spec, publisher, watch.problem or (state or {}).get("line_problem"))
        finally:  # a run still going ends here, also on Ctrl-C (a board would publish on into the next cell)
            publisher.stop()
        record.lap("stop")
    record.lap("teardown")
    record_after_teardown(record, ran, lab, status)
    return seen


def record_after_teardown(record: CellWriter, ran: list[Container], lab: KeptLab | None,
                          status: Callable[[str], None]) -> None:
    """What the cell records once it is torn down: the images its containers ran, with the versions inside them
    (environment/record.py: read once per image, its own phase ``images`` in the timings), and what of a kept-up lab
    it had."""
    record.set(images=ran_images(ran, compose.project()))
    record.lap("images")
    if lab is not None:
        record_cut(record, lab.facts, status)


def record_cut(record: CellWriter, facts: dict[str, Any], status: Callable[[str], None]) -> None:
    """A kept-up cell's lab facts into its record, and its cut's warnings: a cut before the capture held the cell's
    end (recorded), a cut whose check was not lossless (recorded and printed: the block's whole capture is kept)."""
    record.set(lab=facts)
    capture = facts.get("capture") or {}
    if capture.get("complete") is False:
        record.warn("the capture had no packet from after the cell's end when it was cut: the cell's last packets "
                    "may be missing from its capture (they are in the block's gaps.pcapng)")
    split = capture.get("split") or {}
    if split.get("lossless") is False:
        message = (f"the capture split was not lossless at this cell's cut: {split.get('missing')} packets missing, "
                   f"{split.get('extra')} extra (the window's packets: {split.get('window_packets_in_capture')} in "
                   f"the block's capture, {split.get('window_packets_taken')} taken; packets read "
                   f"{split.get('packets_read')}, written {split.get('packets_written')}); the block's whole capture "
                   f"is kept in {facts.get('folder')}/capture/")
        record.warn(message)
        status(f"{record.cell_id}: warning: {message}")


def count_messages(lay: Layout, spec: RunSpec, progress: Callable[[int, int], None],
                   watch: LineWatch | None = None, ended_early: Callable[[], bool] = lambda: False) -> int:
    """Count until every message arrived, the timeout, or (checked once a second) a container failed,
    the delay line broke or the publisher's run ended early (a board's); DiskFull once the run folder's disk filled
    (results/space.py check_still_room)."""
    def broken() -> bool:
        check_still_room(lay.root)
        return ended_early() or run_broken(compose.containers()) or (watch is not None and watch.broken())

    total = spec.messages_expected
    n = wait_for_messages(lay, total, spec.timeout_s(), lambda k: progress(k, total), throttled(broken, 1.0))
    progress(n, total)
    return n


def run_broken(containers: list[Container]) -> bool:
    """A container failed, or one the run needs (broker, capture, subscriber) is no longer running."""
    return docker.first_failure(containers) is not None or bool(stopped_core(containers))


def stopped_core(containers: list[Container]) -> list[Container]:
    return [c for c in containers if c.service in compose.CORE_SERVICES and not c.state.running]


def verdict(seen: Observed, spec: RunSpec, publisher: Publisher, line_problem: str | None = None) -> str | None:
    """None for a good run, else the error, naming first the service that failed first (or the delay line: a
    line problem starts "the delay line ...")."""
    if line_problem:
        return line_problem
    pub_error = publisher.error() if seen.publisher_exit_code != 0 else None
    failure = docker.first_failure(seen.containers)
    if failure is not None and failure.service == publisher.service:
        return f"{failure.first()}: {pub_error}"
    if failure is not None:
        return f"{failure.first()}; publisher: {pub_error or 'ok'}"
    stopped = stopped_core(seen.containers)
    if stopped:
        c = stopped[0]
        return (f"the {c.service} container stopped mid-run ({c.state.status}, exit code {c.state.exit_code}); "
                f"publisher: {pub_error or 'ok'}")
    if pub_error is not None:
        return pub_error
    if seen.received < spec.messages_expected and not spec.values().get("events"):  # events lose on purpose
        return (f"only {seen.received} of {spec.messages_expected} messages arrived within "
                f"{spec.timeout_s():.0f} s")
    return None


