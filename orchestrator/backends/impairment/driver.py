"""Run the playbooks through ansible-runner; apply, show and clear an impairment on its targets.

The playbooks only run the argv lists of the plan (``plan.py``) they receive as extra vars; what
happened is read from ansible-runner's artifacts (status, rc, per-item events), never its stdout.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator.backends import ssh_masters
from orchestrator.backends.impairment import helpers, queue
from orchestrator.backends.impairment.argv import NETEM_MISSING
from orchestrator.backends.impairment.models import LOCALHOST, ImpairmentRecord, ImpairmentTarget, PlanCommand
from orchestrator.backends.impairment.plan import build_plan, state_has_ours
from orchestrator.backends.impairment.probe import check_supported
from orchestrator.backends.remote_bounds import ansible_bounds_env, runner_settings
from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES
from orchestrator.model.impairment import Impairment
from orchestrator.paths import tree
from orchestrator.signals import sigint_deferred, stop_signals_held

_NONE = Impairment(name="none")  # the plan of clear and show: every target, nothing to apply


def local_inventory() -> dict[str, Any]:
    return {
        "all": {
            "hosts": {
                LOCALHOST: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
            }
        }
    }


def _ansible_env() -> dict[str, str]:
    path = os.environ.get("PATH", "")
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in path.split(os.pathsep):
        path = venv_bin + os.pathsep + path
    return {
        "PATH": path,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "ANSIBLE_PIPELINING": "1",
        **ansible_bounds_env(),  # keepalive, connect and task timeouts of every remote step
        # the SSH masters' folder (the user's, or this process's own): closed when the command ends
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(ssh_masters.folder_for_playbooks()),
    }


class PlaybookResult(BaseModel):
    """What we read from ansible-runner's artifacts: status, rc and the per-item task events."""

    model_config = ConfigDict(extra="forbid")

    playbook: str
    status: str
    rc: int
    items: list[dict[str, Any]]
    failures: list[str]
    unreachable: list[str] = []  # hosts Ansible could not reach (or lost) during the run
    outputs: dict[str, dict[str, dict[str, Any]]] = {}  # host -> task name -> rc, stdout, stderr (plain tasks)


def _item(host: Any, task: Any, res: dict[str, Any], failed: bool) -> dict[str, Any]:
    return {"host": host, "task": task, "failed": failed, "item": res.get("item", {}), "rc": res.get("rc"),
            "stdout": res.get("stdout", ""), "stderr": res.get("stderr", "")}


def _failure(host: Any, task: Any, res: dict[str, Any]) -> str:
    msg = res.get("msg") or ""
    cmd = " ".join(res.get("cmd") or []) if isinstance(res.get("cmd"), list) else res.get("cmd", "")
    stderr = (res.get("stderr") or "").strip()
    return " | ".join(p for p in (f"{host}: {task}", cmd, stderr or msg) if p)


def _event_items(events: Iterator[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-command items and failure lines: from our module's ``testbed_items`` (one task runs a step's
    every command) or from a loop's item events."""
    items: list[dict[str, Any]] = []
    failures: list[str] = []
    for ev in events:
        kind = ev.get("event", "")
        data = ev.get("event_data", {})
        host, task = data.get("host"), data.get("task")
        res = data.get("res", {}) or {}
        if kind in ("runner_on_ok", "runner_on_failed") and "testbed_items" in res:
            for it in res["testbed_items"]:
                items.append(_item(host, task, it, bool(it.get("failed"))))
                if it.get("failed"):
                    failures.append(_failure(host, task, it))
            continue
        if kind in ("runner_item_on_ok", "runner_item_on_failed"):
            items.append(_item(host, task, res, kind.endswith("failed")))
        if kind in ("runner_on_failed", "runner_item_on_failed", "runner_on_unreachable"):
            if kind == "runner_on_failed" and "results" in res:
                continue  # the loop's summary; its items were reported one by one
            failures.append(_failure(host, task, res))
    return items, failures


def _event_outputs(events: Iterator[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, dict[str, Any]]]]:
    """Hosts found unreachable, and what each plain task printed on each host (the last event of a task wins)."""
    unreachable: list[str] = []
    outputs: dict[str, dict[str, dict[str, Any]]] = {}
    for ev in events:
        kind = ev.get("event", "")
        data = ev.get("event_data", {})
        host, task = str(data.get("host", "")), str(data.get("task", ""))
        res = data.get("res", {}) or {}
        if kind == "runner_on_unreachable" and host not in unreachable:
            unreachable.append(host)
        if kind in ("runner_on_ok", "runner_on_failed") and "stdout" in res:
            outputs.setdefault(host, {})[task] = {"rc": res.get("rc"), "stdout": res.get("stdout", ""),
                                                  "stderr": res.get("stderr", "")}
    return unreachable, outputs


def run_playbook(
    playbook: str,
    extravars: Mapping[str, Any],
    *,
    inventory: Path | Mapping[str, Any] | None = None,
    cancellable: bool = True,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    stop_on_unreachable: bool = False,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` through ansible-runner and read its artifacts (never stdout).

    Ctrl-C (SIGINT, or SIGTERM/SIGHUP) during the run cancels it when ``cancellable`` (else the run finishes) and is
    then delivered again to the caller's handler, so a KeyboardInterrupt still reaches the caller.
    We pass our own cancel callback: otherwise ansible-runner installs SIGINT/SIGTERM handlers that
    it never removes and later Ctrl-C presses would be swallowed. ``timeout_s``: the whole run's bound (then
    killed, status "timeout"); each remote step has its own (backends/remote_bounds.py). ``env``: more of Ansible's
    settings (e.g. ANSIBLE_STRATEGY). ``stop_on_unreachable``: the run is cancelled as soon as a host is lost (the
    other hosts' work is then stopped by the caller's teardown, not left to run to its end).
    """
    import ansible_runner  # backends only: model/ must not import it

    book = tree() / "playbooks" / playbook  # the checkout's, or the installed package's (paths.py)
    if not book.is_file():
        raise TestbedError(f"playbook not found: {book}", hint="run the testbed from its checkout, or reinstall it")

    inv: Any = str(inventory) if isinstance(inventory, Path) else (inventory or local_inventory())
    pending: list[int] = []
    lost: list[str] = []

    def watch(event: dict[str, Any]) -> bool:
        if stop_on_unreachable and event.get("event") == "runner_on_unreachable":
            lost.append(str((event.get("event_data") or {}).get("host")))
        return True

    with stop_signals_held(pending), tempfile.TemporaryDirectory(prefix="testbed-ansible-") as private:
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=str(book),
            inventory=inv,
            extravars=dict(extravars),
            quiet=True,
            envvars={**_ansible_env(), **(env or {})},
            cancel_callback=(lambda: bool(pending) or bool(lost)) if cancellable else (lambda: bool(lost)),
            event_handler=watch,
            settings=runner_settings(),
            timeout=max(1, round(timeout_s)) if timeout_s else None,
        )
        items, failures = _event_items(iter(runner.events))
        unreachable, outputs = _event_outputs(iter(runner.events))
        status, rc = str(runner.status), int(runner.rc if runner.rc is not None else -1)
    if pending:  # delivered as Ctrl-C: the caller's KeyboardInterrupt path tears down
        signal.raise_signal(signal.SIGINT)
    return PlaybookResult(playbook=playbook, status=status, rc=rc, items=items, failures=failures,
                          unreachable=unreachable, outputs=outputs)


def _raise_failed(result: PlaybookResult, what: str) -> None:
    if result.status == "successful" and result.rc == 0:
        return
    netem = [f for f in result.failures if NETEM_MISSING in f]
    message = f"{what} failed (ansible-runner status {result.status}, rc {result.rc})"
    if netem:
        message = netem[0].split(" | ")[-1]
    raise TestbedError(
        message,
        evidence="\n".join(result.failures[-10:]) or None,
        hint=None if netem else "run the playbook by hand with -vvv to see more (docs/impairment.md)",
    )


def _render_state(result: PlaybookResult, task_name: str) -> str:
    blocks: list[str] = []
    for it in result.items:
        if it["task"] != task_name:
            continue
        argv = it["item"].get("argv", [])
        head = f"$ [{it['host']}] {' '.join(argv)}"
        if it["rc"] == 0:
            body = (it["stdout"] or "").rstrip() or "(empty)"
        else:
            last = ((it["stderr"] or "").strip().splitlines() or ["no output"])[0]
            body = f"(absent: {last.strip()})"
        blocks.append(f"{head}\n{body}")
    return "\n".join(blocks) + ("\n" if blocks else "")


def _apply_run(
    impairment: Impairment, targets: Sequence[ImpairmentTarget], inventory: Path | None, **how: Any
) -> tuple[str, str]:
    plan = build_plan(impairment, targets, **how)
    result = run_playbook("impair.yml", plan, inventory=inventory)
    _raise_failed(result, f"applying impairment {impairment.name}")
    return _render_state(result, "show state before"), _render_state(result, "show state after")


def apply(
    impairment: Impairment, targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None
) -> str:
    """Clear leftovers of ours, apply ``impairment`` and return the state afterwards. Container targets'
    helpers stay running with the impairment: `clear` removes them."""
    containers = helpers.containers_of(targets)
    if inventory is None:
        check_supported(impairment, in_containers=bool(containers))
    build_plan(impairment, targets)  # bad targets fail before anything is touched
    try:
        helpers.start_helpers(containers)
        return _apply_run(impairment, targets, inventory)[1]
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: the playbook was stopped midway, what it applied cleared
        with sigint_deferred():
            _clear_interrupted(targets, inventory)
        raise
    except BaseException:
        with sigint_deferred():
            helpers.remove_helpers(containers)  # the playbook cleared what it applied
        raise


def _clear_interrupted(targets: Sequence[ImpairmentTarget], inventory: Path | None) -> None:
    """Clear after an apply that was interrupted; a clear that fails is said, as an interruption (exit 130)."""
    try:
        _clear_run(targets, inventory)
    except TestbedError as exc:
        where = f" --inventory {inventory}" if inventory else ""
        raise TestbedError(f"interrupted while applying; clearing failed: {exc.message}", evidence=exc.evidence,
                           hint=f"the impairment may be left: testbed impair clear{where}", exit_code=130) from None


def clear(targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None) -> None:
    """Remove our qdiscs and nft table from every target, then the helpers; safe when nothing is there."""
    _clear_run(targets, inventory)


def _clear_run(targets: Sequence[ImpairmentTarget], inventory: Path | None) -> tuple[str, str]:
    """Clear (through helpers alive or started again), remove the helpers; the state (before, after)."""
    containers = helpers.containers_of(targets)
    try:
        gone = set(helpers.revive(containers))  # no helper and no container: the namespace went with them
        live = [t for t in targets if t.container not in gone]
        if not live:
            return "", ""
        result = run_playbook("clear.yml", build_plan(_NONE, live), inventory=inventory, cancellable=False)
        _raise_failed(result, "clearing impairment")
    finally:
        helpers.remove_helpers(containers)
    state = _render_state(result, "show state after clear")
    if state_has_ours(state):
        raise TestbedError("impairment still present after clear", evidence=state)
    return _render_state(result, "show state before clear"), state


def show(targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None) -> str:
    """``tc qdisc show`` and ``nft list table inet testbed_impair`` per target, as text."""
    if not targets:
        return ""
    containers = helpers.containers_of(targets)
    started = helpers.dead(containers)
    gone = set(helpers.revive(containers))
    try:
        live = [t for t in targets if t.container not in gone]
        result = run_playbook("show.yml", build_plan(_NONE, live), inventory=inventory)
    finally:
        helpers.remove_helpers([c for c in started if c not in gone])  # only those started for this show
    _raise_failed(result, "showing impairment state")
    return _render_state(result, "show state")


def line_targets(impairment: Impairment, targets: Sequence[ImpairmentTarget]) -> list[ImpairmentTarget]:
    """The targets where a userspace delay line runs for ``impairment`` (queue mechanism)."""
    return [t for t in targets if queue.runs_line(impairment, t)]


def line_health(impairment: Impairment, targets: Sequence[ImpairmentTarget], *, final: bool = False) -> str | None:
    """The first problem of a delay line of this impairment (dead, unhealthy, packets unaccounted), or None."""
    for t in line_targets(impairment, targets):
        problem = queue.line_problem(t, final=final)
        if problem:
            return problem
    return None


@contextmanager
def impaired(
    impairment: Impairment, targets: Sequence[ImpairmentTarget], *, inventory: Path | None = None,
    mechanism: str = "netem", seed: int = AXES["seed"].default, setup: Sequence[PlanCommand] = (),
) -> Iterator[ImpairmentRecord]:
    """Apply ``impairment`` for the duration of the block; ALWAYS clear afterwards (also on Ctrl-C).

    The helpers of container targets live exactly as long: a helper found dead after the block fails
    it (TestbedError), after its namespace was read and cleared through a fresh helper. A delay line
    (queue mechanism) that died, overflowed or left packets unaccounted is named in the record's
    ``line_problem``: the caller fails its cell (and keeps what it measured)."""
    containers = helpers.containers_of(targets)
    if inventory is None:
        check_supported(impairment, in_containers=bool(containers), mechanism=mechanism)
    how: dict[str, Any] = {"mechanism": mechanism, "seed": seed, "setup": setup}
    build_plan(impairment, targets, **how)  # bad targets fail before anything is touched
    record: ImpairmentRecord | None = None
    died: list[str] = []
    broken: str | None = None
    try:
        helpers.start_helpers(containers)
        before, after = _apply_run(impairment, targets, inventory, **how)
        record = ImpairmentRecord(impairment=impairment, targets=list(targets), before=before, after=after,
                                  delay_mechanism=mechanism if impairment.needs_netem else None)
        yield record
        died = helpers.dead(containers)
        death = helpers.describe_death(died) if died else ""
        broken = None if died else line_health(impairment, targets, final=True)
    finally:
        with sigint_deferred():
            before_clear, state = _clear_run(targets, inventory)
        if record is not None:
            record.before_clear = before_clear
            record.after_clear = state
            record.line_problem = broken
    if died:
        raise TestbedError(f"the impairment helper died during the cell: {death}",
                           hint="the impairment may have been absent for part of the cell; it was cleared "
                                "through a new helper and the cell is failed")

