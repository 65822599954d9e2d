"""When the Docker engine stops answering mid-command (a dockerd stopped or being restarted): the engine's API calls
say so by name, and a teardown waits for the engine to answer again, bounded, then runs once more."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from orchestrator.backends.docker import ENGINE_HINT, engine_version
from orchestrator.errors import TestbedError, ToolError
from orchestrator.waiting import poll

T = TypeVar("T")

ENGINE_BACK_WITHIN_S = 60.0  # a teardown waits this long for an engine that stopped answering (being restarted)


def engine_answers() -> bool:
    try:
        engine_version()
    except TestbedError:
        return False
    return True


def once_the_engine_answers(step: Callable[[], T], within_s: float = ENGINE_BACK_WITHIN_S) -> T:
    """``step`` (a teardown's), run once more when it failed because the engine did not answer: after waiting (at
    most ``within_s``) for the engine to answer again, as it does once a restarted dockerd is up. A step that
    failed with the engine answering, or the engine still silent, raises its error."""
    try:
        return step()
    except (ToolError, TestbedError):
        if engine_answers() or not poll(engine_answers, bool, within_s, interval_s=1.0).met:
            raise
    return step()


@contextmanager
def engine_api(what: str) -> Iterator[None]:
    """Calls of the engine's API (the docker SDK) for ``what``: a connection to the engine refused or dropped (a
    dockerd stopped or being restarted) becomes a TestbedError naming the engine, not an internal error. The API's
    own errors (NotFound, ...) pass through for the caller."""
    import requests

    try:
        yield
    except requests.exceptions.ConnectionError as exc:
        raise TestbedError(f"the Docker engine stopped answering while {what}", hint=ENGINE_HINT,
                           evidence=str(exc)) from exc
