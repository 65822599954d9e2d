"""Impairment through `testbed up` / `down` as root: a broker-side impairment on a fixed host port, cleared by
`down`. The loss and rate runs, made as our users make them, are tests/integration/test_impairment_user_runs.py's
(the second docker lane); Ctrl-C or SIGTERM during an impaired run leaving nothing is
tests/integration/test_sigterm_cleanup.py's (run, up, impair apply, a board run, a sweep) and the fault suite's."""

from __future__ import annotations

import subprocess

from orchestrator.paths import state_dir

from .conftest import owned, run_testbed, service_container


def test_up_with_broker_side_impairment_is_cleared_by_down():
    run_testbed("down")
    proc = run_testbed("up", "--scenario", "plain", "--host-port", "18883", "--impairment", "narrowband-250kbit")
    try:
        # narrowband is publisher->broker: refused for `up`, nothing started
        assert proc.returncode == 1 and "runs no publisher" in proc.stderr
        assert owned("container") == []
        profile = state_dir().parent / ".cache" / "b2s-loss.yaml"
        profile.parent.mkdir(parents=True, exist_ok=True)
        profile.write_text("name: b2s-loss\nloss_pct: 3\ndirection: broker->subscriber\n")
        proc = run_testbed("up", "--scenario", "plain", "--host-port", "18883", "--impairment", str(profile))
        assert proc.returncode == 0, proc.stderr
        assert "impairment b2s-loss applied to broker->subscriber" in proc.stdout
        pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", service_container("subscriber")],
                             capture_output=True, text=True, check=True).stdout.strip()
        table = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "nft", "list", "table", "inet",
                                "testbed_impair"], capture_output=True, text=True, check=False).stdout
        assert "numgen random mod 100 < 3" in table
        down = run_testbed("down")
        assert down.returncode == 0 and "impairment b2s-loss cleared" in down.stdout
        assert owned("container") == []
        again = run_testbed("down")
        assert again.returncode == 0
    finally:
        run_testbed("down")
