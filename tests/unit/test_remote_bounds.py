"""The time bounds of remote steps (backends/remote_bounds.py) reach every playbook run, and a lab's finish names
the hosts it could not tear down (measure/multihost.py hosts_left)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.backends import remote_bounds
from orchestrator.backends.impairment import driver
from orchestrator.backends.impairment.driver import PlaybookResult
from orchestrator.backends.impairment.targets import LabInventory
from orchestrator.backends.multihost import LabRoles, roles_of
from orchestrator.measure.multihost import DOWN_TASK, FINISH_INTERRUPTED_S, hosts_left


def test_every_playbook_run_gets_the_bounds_and_the_quick_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Done:
        status, rc = "successful", 0
        events: list[dict[str, Any]] = []

    def run(**kwargs: Any) -> Done:
        seen.update(kwargs)
        return Done()

    import ansible_runner
    monkeypatch.setattr(ansible_runner, "run", run)
    driver.run_playbook("show.yml", {}, timeout_s=60, env={"ANSIBLE_STRATEGY": "free"})
    env = seen["envvars"]
    assert "-o ServerAliveInterval=2 -o ServerAliveCountMax=2" in env["ANSIBLE_SSH_ARGS"]
    assert "ControlMaster=auto -o ControlPersist=10s" in env["ANSIBLE_SSH_ARGS"]  # a master per host, 10 s idle
    assert env["ANSIBLE_TIMEOUT"] == "5" and env["ANSIBLE_TASK_TIMEOUT"] == "300"
    assert env["ANSIBLE_STRATEGY"] == "free"
    assert seen["settings"] == {"pexpect_timeout": remote_bounds.CANCEL_POLL_S} and seen["timeout"] == 60
    assert remote_bounds.lost_after_s() == 6


def _roles() -> LabRoles:
    return roles_of(LabInventory(source="inv.yml", broker=["b"], publisher=["p"], router=["r"],
                                 hostvars={"b": {"testbed_broker_runtime": "native"}, "p": {}, "r": {}}))


def _finish(status: str, down_ok: list[str], unreachable: tuple[str, ...] = (),
            failures: tuple[str, ...] = ()) -> PlaybookResult:
    return PlaybookResult(playbook="lab.yml", status=status, rc=0 if status == "successful" else 2, items=[],
                          failures=list(failures), unreachable=list(unreachable),
                          outputs={h: {DOWN_TASK: {"rc": 0, "stdout": "", "stderr": ""}} for h in down_ok})


def test_a_finish_names_the_lost_host_and_only_it() -> None:
    roles = _roles()
    assert hosts_left(_finish("successful", ["b", "p"]), roles) == {}
    lost = hosts_left(_finish("failed", ["b"], unreachable=("p",), failures=("p: Stop what runs | unreachable",)),
                      roles)
    assert lost == {"p": "it stopped answering (lost after 6 s of SSH keepalives unanswered)"}
    assert hosts_left(_finish("timeout", ["p"]), roles) == {
        "b": f"the teardown did not end within {FINISH_INTERRUPTED_S} s"}
    assert hosts_left(_finish("failed", ["p"], failures=("b: Stop every process of ours | rm: busy",)), roles) == {
        "b": "b: Stop every process of ours | rm: busy"}
