"""The time bounds of every remote step (Ansible over SSH: a lab across hosts, `testbed impair --inventory`).

They are the product's own settings, handed to every ansible-playbook run (backends/impairment/driver.py) as
Ansible's environment, so they hold whatever the inventory says about keepalives; an inventory can still
give other figures (``ansible_ssh_args``, ``ansible_ssh_timeout``; docs/multi-host.md says how):

- SSH keepalive: a host that stops answering (powered off, cable out, frozen) is lost after
  ``KEEPALIVE_INTERVAL_S * (KEEPALIVE_COUNT + 1)`` s without an answer (lost_after_s: a keepalive every interval,
  the one after KEEPALIVE_COUNT unanswered ends the connection) and is UNREACHABLE for the playbook. Measured
  (tests/integration/test_lab_run.py): a task started on a frozen host is UNREACHABLE that long after it started;
- ConnectTimeout: a new connection (and its banner exchange) that does not complete in ``CONNECT_TIMEOUT_S``;
- a task that runs longer than ``TASK_TIMEOUT_S`` fails on its host (a task that may run longer, the
  publisher's, gives its own ``timeout:`` in playbooks/tasks/lab_publish.yml);
- ``CANCEL_POLL_S``: how often ansible-runner asks whether Ctrl-C was pressed (its default is 5 s).
"""

from __future__ import annotations

KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 2
CONNECT_TIMEOUT_S = 5
TASK_TIMEOUT_S = 300
CANCEL_POLL_S = 0.2
# Ansible's own default ssh_args, which ANSIBLE_SSH_ARGS replaces: one master connection per host, kept 10 s idle
# (Ansible's default is 60 s): a sweep's cells reuse it, and it ends soon after the command (fault suite,
# lab-host-paused: a master ssh process of the user's was still running 30 s after the sweep ended)
CONTROL_PERSIST = "-C -o ControlMaster=auto -o ControlPersist=10s"


def lost_after_s() -> int:
    """How long a host that answers nothing takes to be counted lost."""
    return KEEPALIVE_INTERVAL_S * (KEEPALIVE_COUNT + 1)


def ansible_bounds_env() -> dict[str, str]:
    """Ansible's environment for the bounds above."""
    return {
        "ANSIBLE_SSH_ARGS": f"{CONTROL_PERSIST} -o ServerAliveInterval={KEEPALIVE_INTERVAL_S} "
                            f"-o ServerAliveCountMax={KEEPALIVE_COUNT}",
        "ANSIBLE_TIMEOUT": str(CONNECT_TIMEOUT_S),
        "ANSIBLE_TASK_TIMEOUT": str(TASK_TIMEOUT_S),
    }


def runner_settings() -> dict[str, float]:
    """ansible-runner's settings: Ctrl-C noticed within CANCEL_POLL_S."""
    return {"pexpect_timeout": CANCEL_POLL_S}
