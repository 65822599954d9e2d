"""`testbed run|sweep --inventory FILE`: one cell across the lab's hosts (docs/multi-host.md).

up on the broker host (time echo, broker, capture, subscriber subscribed) and the publisher host (a clock exchange)
-> the profile applied on the router hosts (backends/impairment with the inventory) -> the publisher (vdevice or
the fleet) started there and awaited (a timeout from the spec) -> impairment cleared -> finish on every host:
messages awaited, capture stopped with SIGINT, everything stopped, a second clock exchange, the records fetched,
then every process and file of ours removed (always: also after a failure or Ctrl-C, which waits for it) ->
the records unpacked into the LOCAL run folder under the usual names (lab/collect.py) -> the same analysis as on
one host (runanalysis/analyse.py analyse_run_folder, with add_lab_metrics). The site "a lab inventory" of
measure/site.py (LabSite). A host that cannot be reached fails the cell, naming it.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.backends.impairment import clear, targets_for_router
from orchestrator.backends.impairment.driver import PlaybookResult
from orchestrator.backends.impairment.plan import build_plan
from orchestrator.backends.impairment.targets import LabInventory
from orchestrator.backends.multihost import LabRoles, host_problems, load_lab, run_lab
from orchestrator.backends.process import which
from orchestrator.backends.remote_bounds import lost_after_s
from orchestrator.environment.record import lab_environment
from orchestrator.errors import TestbedError
from orchestrator.lab.collect import collect_broker, collect_publishers, host_facts, host_record
from orchestrator.lab.keptlab import KeptLab
from orchestrator.lab.remote import COUNT_WAIT_S, START_LEAD_S, cell_vars, host_devices, native_broker_conf, stage
from orchestrator.lab.start import apply_start, start_record
from orchestrator.lab.topology import count_lines, prepare_run_dir
from orchestrator.measure.cell import CellWriter, Observed
from orchestrator.measure.impairment import impairment_applied
from orchestrator.model import rules
from orchestrator.model.impairment import Impairment, load_impairment
from orchestrator.model.layout import Layout, inventory_copy
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers.variants import Variant
from orchestrator.publishers.virtual import publisher_args
from orchestrator.results.atomic import copy_file_atomic, read_json, write_json_atomic
from orchestrator.runanalysis.analyse import MoreMetrics
from orchestrator.runanalysis.labanalysis import add_lab_metrics
from orchestrator.signals import sigint_deferred

FACTS_TASK = "Lab folder and description of the host"  # playbooks/tasks/lab_up.yml
DOWN_TASK = "Stop every process of ours and remove the lab folder"  # playbooks/tasks/lab_down.yml
CAPACITY_TASK = "This publisher host can carry its share (cores, memory, open files, threads, ports)"  # lab_up.yml
FINISH_INTERRUPTED_S = 60  # the finish after Ctrl-C or an error: a stuck host cannot hold the user longer


class LabSite:
    """The hosts of a lab inventory (docs/multi-host.md): broker, publisher and router hosts over SSH."""

    name = "lab"
    fresh_lab_reason: str | None = "a lab inventory's cell brings its hosts' lab up and down itself (lab/remote.py)"

    def __init__(self, inventory: Path) -> None:
        self.inventory = inventory

    @property
    def more_metrics(self) -> MoreMetrics | None:
        return add_lab_metrics  # the publisher host's clock, the losses before the capture

    def preflight(self, spec: RunSpec, variant: Variant) -> Impairment:
        return lab_preflight(spec, self.inventory, variant)

    def check_profile(self, impairment: str, mechanism: str) -> None:
        """Nothing here: the routers' kernels matter, and their playbook checks them."""

    def measure(self, scenario: Scenario, spec: RunSpec, variant: Variant, impairment: Impairment,
                record: CellWriter, progress: Callable[[int, int], None], status: Callable[[str], None],
                lab: KeptLab | None = None) -> Observed:  # never given: fresh_lab_reason
        return measure_lab(scenario, spec, variant, impairment, record, progress, status, self.inventory)

    def environment(self) -> dict[str, Any]:
        return lab_environment()

    def manifest(self, plan: SweepPlan, bundle: Path) -> dict[str, Any]:
        return lab_manifest(self.inventory, bundle)


def lab_preflight(spec: RunSpec, source: Path, variant: Variant) -> Impairment:
    """What can be refused before a host is contacted: the profile on the routers, the inventory's roles, a share
    above the per-host limit."""
    impairment = load_impairment(spec.impairment)
    try:  # the rules on the profile (orchestrator/model/rules.py), e.g. the routers impair publisher->broker only
        rules.check_profile(impairment, spec.values())
    except rules.RuleViolation as exc:
        raise TestbedError(str(exc)) from None
    if which("tshark") is None:
        raise TestbedError("tshark is missing on this host (the analysis runs here)", hint="apt-get install -y tshark")
    roles, inventory = load_lab(source)
    host_devices(spec, roles, variant.dealt_over_hosts)
    if not impairment.is_noop and not inventory.router:
        raise TestbedError(f"impairment {impairment.name} needs a router host (group router) in {spec.inventory}: "
                           "the profile is applied on its own interfaces", hint="docs/multi-host.md")
    if not impairment.is_noop:
        build_plan(impairment, targets_for_router(inventory))  # e.g. a delay profile and no egress interface
    return impairment


def measure_lab(scenario: Scenario, spec: RunSpec, variant: Variant, impairment: Impairment, record: CellWriter,
                progress: Callable[[int, int], None], status: Callable[[str], None], source: Path) -> Observed:
    """The cell across hosts; the teardown on every host runs before this returns, also when it raises."""
    roles, inventory = load_lab(source)
    roles = roles.for_cell(variant.dealt_over_hosts)  # one device: the first publisher host only
    lay, pki = prepare_run_dir(record.lay.root, scenario)
    _fresh_records(lay, source, scenario, roles)
    seen = Observed()
    with tempfile.TemporaryDirectory(prefix="testbed-lab-") as tmp:
        folder = Path(tmp)
        staged = stage(lay, scenario, spec, roles, pki, variant.device_folders(lay))
        labvars = cell_vars(scenario, lay, pki, spec, roles, staged, folder,
                            device_argv=publisher_args(scenario, lay, pki, spec, host=roles.broker_address),
                            dealt=variant.dealt_over_hosts)
        status(f"{record.cell_id}: up on {roles.broker.name} ({roles.runtime}) and "
               f"{', '.join(h.name for h in roles.publishers)}")
        state: dict[str, Any] = {"interrupted": True}  # until _up_and_publish returns
        try:
            _up_and_publish(labvars, roles, inventory, impairment, spec, variant, record, status, state)
            state["interrupted"] = False
        finally:  # also on Ctrl-C, which waits until every reachable host is clean (a bounded wait)
            with sigint_deferred():
                finished = _finish(labvars, source, spec, state)
                _clear_again(record, inventory)
                record.lap("stop")
                _collect(folder, lay, roles, record, state)
                _name_hosts_left(finished, roles, record, status)
                record.lap("teardown")
    seen.received = count_lines(lay.subscriber_log)
    progress(seen.received, spec.messages_expected)
    codes = {h.name: _exit_code(lay, h.name, "publisher") for h in roles.publishers}
    state["failed_host"] = next((h for h, c in codes.items() if c not in (0, None)), roles.publisher.name)
    seen.publisher_exit_code = codes[state["failed_host"]]
    seen.error = lab_verdict(state["published"], finished, seen, spec, lay, roles, state["failed_host"])
    return seen


def _fresh_records(lay: Layout, source: Path, scenario: Scenario, roles: LabRoles) -> None:
    """The inventory's copy, the broker's native configuration; no record of an earlier attempt left."""
    copy_file_atomic(source, inventory_copy(lay.root, source))  # 0600: a secret
    lay.native_broker_conf.write_text(native_broker_conf(scenario, roles.broker.lab_dir))
    for stale in (lay.host_clock, lay.publisher_log, lay.publisher_summary, lay.publisher_connections,
                  lay.fleet_hosts, lay.fleet_start):
        stale.unlink(missing_ok=True)
    for folder in (lay.logs / "hosts", lay.fleet_dir):
        shutil.rmtree(folder, ignore_errors=True)


def _up_and_publish(labvars: dict[str, Any], roles: LabRoles, inventory: LabInventory, impairment: Impairment,
                    spec: RunSpec, variant: Variant, record: CellWriter, status: Callable[[str], None],
                    state: dict[str, Any]) -> None:
    source = Path(inventory.source)
    up = run_lab("up", labvars, source, check=False)
    returned = time.monotonic()
    state["facts"] = {h: host_facts("\n".join(out.get(t, {}).get("stdout", "") for t in (FACTS_TASK, CAPACITY_TASK)))
                      for h, out in up.outputs.items()}
    problems = host_problems(up)
    if up.status != "successful" or up.rc != 0:
        raise TestbedError(f"lab up failed: {problems[0] if problems else up.status}",
                           evidence="\n".join(problems[:10]) or None,
                           hint="run playbooks/lab.yml by hand with -vvv (docs/multi-host.md)")
    state["up"] = True
    if variant.dealt_over_hosts and len(roles.publishers) > 1:  # one start on every host's clock (lab/start.py)
        plan = apply_start(up.outputs, labvars, time.monotonic() - returned, START_LEAD_S)
        write_json_atomic(record.lay.fleet_start, start_record(
            plan, devices=spec.devices, connect_rate=spec.connect_rate, weights=roles.weights,
            hosts=[h.name for h in roles.publishers],
            addresses={h.name: state["facts"].get(h.name, {}).get("route_src") or h.address for h in roles.publishers}))
    record.lap("up")
    with impairment_applied(impairment, record.lay, "netem", spec.seed, targets=targets_for_router(inventory),
                            inventory=source):
        record.lap("impair")
        status(f"{record.cell_id}: publishing {spec.samples} x {spec.payload} B{variant.what(spec, rate=False)} on "
               f"{', '.join(h.name for h in roles.publishers)}")
        # a publisher host lost: the others' shares are not left to run to their end (the finish stops them)
        state["published"] = run_lab("publish", labvars, source, check=False,
                                     stop_on_unreachable=len(roles.publishers) > 1)
        record.lap("publish")


def _finish(labvars: dict[str, Any], source: Path, spec: RunSpec, state: dict[str, Any]) -> PlaybookResult:
    """collect + down on every host; the messages awaited only when the publisher ran to its end. After an
    interruption (or an error) neither the messages nor a second clock exchange are awaited (no host waits for
    another), every host is torn down at its own pace and the whole finish is bounded (FINISH_INTERRUPTED_S): a host
    that stopped answering is lost within the SSH keepalives (backends/remote_bounds.py) while the others are
    torn down."""
    published = state.setdefault("published", None)
    finishing = copy.deepcopy(labvars)
    ran = published is not None and published.status == "successful" and published.rc == 0
    stopped = bool(state.get("interrupted"))
    finishing["testbed_lab"].update(count_expected=spec.messages_expected if ran and not stopped else 0,
                                    probe_post=bool(state.get("up")) and not stopped)
    return run_lab("finish", finishing, source, cancellable=False, check=False,
                   timeout_s=FINISH_INTERRUPTED_S if stopped else None, each_on_its_own=stopped)


def hosts_left(finished: PlaybookResult, roles: LabRoles) -> dict[str, str]:
    """The broker and publisher hosts whose teardown did not complete, each with why."""
    problems = host_problems(finished)
    left = {}
    for host in roles.contacted:
        if finished.outputs.get(host.name, {}).get(DOWN_TASK, {}).get("rc") == 0:
            continue
        said = [p for p in problems if p.startswith(f"{host.name}: ")]
        if host.name in finished.unreachable:
            left[host.name] = f"it stopped answering (lost after {lost_after_s()} s of SSH keepalives unanswered)"
        elif finished.status == "timeout":
            left[host.name] = f"the teardown did not end within {FINISH_INTERRUPTED_S} s"
        else:
            left[host.name] = said[0] if said else f"the teardown did not run ({finished.status})"
    return left


def _name_hosts_left(finished: PlaybookResult, roles: LabRoles, record: CellWriter,
                     status: Callable[[str], None]) -> None:
    """Say which host was not torn down (lost, or too slow), in cell.json and on the terminal."""
    for host, why in hosts_left(finished, roles).items():
        message = (f"{host} was not torn down: {why}; what of ours runs there is stopped and removed by the next "
                   f"lab run on it")
        record.warn(message)
        status(message)


def _clear_again(record: CellWriter, inventory: LabInventory) -> None:
    """When clearing the routers failed (a router that did not answer in time), one more try: the profile
    must not outlive the cell."""
    state = read_json(record.lay.impairment) or {}
    if not state.get("applied") or state.get("after_clear"):
        return
    try:
        clear(targets_for_router(inventory), inventory=Path(inventory.source))
    except TestbedError as exc:
        record.warn(f"the impairment may be left on the routers: {exc.message} "
                    f"(`testbed impair clear --inventory {inventory.source}`)")
        return
    record.warn("clearing the routers failed once; cleared on a second try")


def _collect(folder: Path, lay: Layout, roles: LabRoles, record: CellWriter, state: dict[str, Any]) -> None:
    """The fetched archives into the run folder; cell.json's hosts."""
    broker = roles.broker.name
    got = {broker: collect_broker(folder / f"{broker}.tgz", lay, broker)}
    clocks = collect_publishers(folder, lay, roles)
    got.update({h: c is not None for h, c in clocks.items()})
    facts = state.get("facts") or {}
    record.record.hosts = [host_record(h, facts.get(h.name, {}), clocks.get(h.name)) for h in roles.every_host]
    record.record.inventory = {"source": roles.source, "copy": inventory_copy(lay.root, Path(roles.source)).name}
    state["missing"] = [h for h, ok in got.items() if not ok]


def _exit_code(lay: Layout, host: str, name: str) -> int | None:
    try:
        return int((lay.host_logs(host) / f"{name}.rc").read_text().strip())
    except (OSError, ValueError):
        return None


def publisher_error(lay: Layout, host: str) -> str:
    """The errors vdevice (or the fleet) wrote to its summary, else the last line it printed."""
    summary = read_json(lay.fleet_dir / "summary.json") or read_json(lay.publisher_summary)
    errors = (summary or {}).get("errors")
    if errors:
        return "; ".join(str(e) for e in errors[:5]) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else "")
    try:
        lines = [ln for ln in (lay.host_logs(host) / "publisher.log").read_text().splitlines() if ln.strip()]
    except OSError:
        lines = []
    return lines[-1] if lines else "the publisher exited with an error and printed nothing"


def lab_verdict(published: PlaybookResult | None, finished: PlaybookResult, seen: Observed, spec: RunSpec, lay: Layout,
                roles: LabRoles, publisher: str | None = None) -> str | None:
    """None for a good cell, else the error, naming the host where it went wrong first."""
    if published is not None and (published.status != "successful" or published.rc != 0):
        problems = host_problems(published)
        return f"publish: {problems[0] if problems else published.status}"
    host = publisher or roles.publisher.name  # the publisher host whose program failed
    if seen.publisher_exit_code not in (0, None):
        return f"publisher on {host} exited {seen.publisher_exit_code}: {publisher_error(lay, host)}"
    problems = host_problems(finished)
    if problems:
        return f"finish: {problems[0]}"
    if not lay.capture.exists():
        return f"no capture came back from {roles.broker.name}"
    if seen.received < spec.messages_expected:
        return (f"only {seen.received} of {spec.messages_expected} messages arrived within the publisher's "
                f"{spec.timeout_s():.0f} s and {COUNT_WAIT_S:.0f} s after it")
    return None


def lab_manifest(source: Path, bundle: Path) -> dict[str, Any]:
    """The manifest's "lab": the inventory (copied into the bundle) and its hosts by role."""
    roles, _inventory = load_lab(source)
    copy_file_atomic(source, inventory_copy(bundle, source))  # 0600: a secret
    return {"lab": {"inventory": inventory_copy(bundle, source).name, "source": str(source),
                    "broker_runtime": roles.runtime, "broker_address": roles.broker_address,
                    "hosts": [{"name": h.name, "role": h.role, "address": h.address} for h in roles.every_host],
                    "boards": roles.boards}}
