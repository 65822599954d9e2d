"""`testbed impair apply` stopped midway (Ctrl-C, SIGTERM, SIGHUP: a KeyboardInterrupt) clears what the playbook may
have applied before the interrupt goes on; a clear that fails then says so, as an interruption (exit 130)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.impairment import driver
from orchestrator.backends.impairment.models import ImpairmentTarget
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Impairment

ROUTER = ImpairmentTarget.model_validate({"label": "publisher", "host": "r", "interface": "eth0", "hook": "ingress"})
LOSSY = Impairment(name="lossy-5pct", loss_pct=5)


def _interrupted(*_args: Any, **_kwargs: Any) -> tuple[str, str]:
    raise KeyboardInterrupt("SIGTERM")


def test_an_interrupted_apply_clears_before_the_interrupt_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    cleared: list[Any] = []
    monkeypatch.setattr(driver, "_apply_run", _interrupted)
    monkeypatch.setattr(driver, "_clear_run", lambda targets, inventory: cleared.append((targets, inventory)))
    with pytest.raises(KeyboardInterrupt):
        driver.apply(LOSSY, [ROUTER], inventory=Path("inv.yml"))
    assert cleared == [([ROUTER], Path("inv.yml"))]


def test_an_interrupted_apply_whose_clear_fails_says_what_may_be_left(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*_args: Any) -> None:
        raise TestbedError("clearing impairment failed (ansible-runner status failed, rc 4)")

    monkeypatch.setattr(driver, "_apply_run", _interrupted)
    monkeypatch.setattr(driver, "_clear_run", unreachable)
    with pytest.raises(TestbedError) as exc:
        driver.apply(LOSSY, [ROUTER], inventory=Path("inv.yml"))
    assert exc.value.exit_code == 130
    assert exc.value.message == "interrupted while applying; clearing failed: clearing impairment failed " \
                                "(ansible-runner status failed, rc 4)"
    assert exc.value.hint == "the impairment may be left: testbed impair clear --inventory inv.yml"
