"""backends/engine_lost.py once_the_engine_answers: a teardown step that failed because dockerd was being restarted runs
once more when the engine answers again (bounded); any other failure is raised as it was."""

from __future__ import annotations

import pytest

from orchestrator.backends import engine_lost
from orchestrator.errors import ToolError


class Step:
    def __init__(self, failures: int) -> None:
        self.calls, self.failures = 0, failures

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ToolError(["docker", "compose", "down"], 1, "", "Cannot connect to the Docker daemon")
        return "removed"


def _engine(monkeypatch: pytest.MonkeyPatch, answers: list[bool]) -> list[bool]:
    seen: list[bool] = []

    def answer() -> bool:
        seen.append(answers.pop(0) if answers else seen[-1])
        return seen[-1]

    monkeypatch.setattr(engine_lost, "engine_answers", answer)
    return seen


def test_a_step_that_failed_while_the_engine_was_down_runs_again_once_it_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _engine(monkeypatch, [False, False, True])
    step = Step(failures=1)
    assert engine_lost.once_the_engine_answers(step, within_s=5.0) == "removed"
    assert step.calls == 2 and seen == [False, False, True]


def test_a_step_that_failed_with_the_engine_answering_is_not_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _engine(monkeypatch, [True])
    step = Step(failures=1)
    with pytest.raises(ToolError):
        engine_lost.once_the_engine_answers(step, within_s=5.0)
    assert step.calls == 1


def test_an_engine_still_silent_after_the_bound_raises_the_steps_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _engine(monkeypatch, [False])
    step = Step(failures=5)
    with pytest.raises(ToolError, match="compose"):
        engine_lost.once_the_engine_answers(step, within_s=0.05)
    assert step.calls == 1
