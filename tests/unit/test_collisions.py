"""No collisions between invocations: every `testbed run` gets a folder of its own (two started in one second: two
folders), a sweep name taken in this second is refused by name, and `sweep --resume` of a bundle whose sweep still
runs is refused, naming it (results/bundle_lock.py), while a lock its dead process left blocks nothing.

The measurement itself is left out (this host's preflight and measurement are stand-ins): what is tested is where
the records go, from the command line down, in separate processes released together."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.cli import rebuild, render  # noqa: F401 - imported once here, not in each process
from orchestrator.cli.main import main
from orchestrator.errors import TestbedError
from orchestrator.measure import local, sweep
from orchestrator.measure import run as measure_run
from orchestrator.model.impairment import load_impairment
from orchestrator.model.sweep import SweepPlan
from orchestrator.results import manifest as bundles

FORK = multiprocessing.get_context("fork")
SECOND = dt.datetime(2026, 12, 7, 5, 0, 0, tzinfo=dt.UTC)
SWEEP = ["sweep", "--scenarios", "plain", "--payloads", "65", "--samples", "5", "--interval", "20ms"]


class _Frozen(dt.datetime):
    """Every process of the test starts in the same second."""

    @classmethod
    def now(cls, tz: Any = None) -> _Frozen:  # noqa: ARG003 - the one second
        return cls.fromtimestamp(SECOND.timestamp(), dt.UTC)


def _measure(self: object, scenario: object, spec: object, variant: object, impairment: object, record: Any,
             *_rest: object) -> None:
    """A stand-in measurement: it leaves its process's mark in the run folder, then fails."""
    (record.lay.root / f"measured-by-{os.getpid()}").write_text("")
    time.sleep(0.3)
    raise TestbedError("stand-in measurement")


@pytest.fixture
def this_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(local.ThisHost, "preflight", lambda self, spec, variant: load_impairment("none"))
    monkeypatch.setattr(local.ThisHost, "environment", lambda self: {})
    monkeypatch.setattr(local.ThisHost, "measure", _measure)
    monkeypatch.setattr(measure_run, "dt", SimpleNamespace(datetime=_Frozen, UTC=dt.UTC))
    monkeypatch.setattr(bundles, "utc_stamp", lambda: SECOND.strftime("%Y%m%dT%H%M%SZ"))
    return tmp_path


def _cli(barrier: Any, argv: list[str]) -> None:
    barrier.wait(timeout=30)
    os._exit(main(argv))


def test_two_runs_started_in_one_second_get_two_folders(this_host: Path) -> None:
    barrier = FORK.Barrier(2)
    argv = ["run", "--scenario", "plain", "--payload", "65", "--samples", "5", "--interval", "20ms"]
    procs = [FORK.Process(target=_cli, args=(barrier, argv)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [1, 1]  # the stand-in measurement failed each
    folders = sorted((this_host / "results" / "runs").iterdir())
    marks = {f.name: sorted(m.name for m in f.glob("measured-by-*")) for f in folders}
    assert len(folders) == 2, marks
    assert [len(m) for m in marks.values()] == [1, 1], marks  # each run's records in its own folder
    assert [f.name for f in folders] == ["20261207T050000Z-plain-65B", "20261207T050000Z-plain-65B-2"]


def test_a_sweep_name_taken_in_this_second_is_refused_by_name(this_host: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    plan = SweepPlan(scenarios=["plain"], payloads=[65], samples=5, interval_ms=20)
    job = sweep.start_sweep(plan, Path("out"), "same", ["testbed", "sweep"])
    code = main([*SWEEP, "--name", "same", "--out", "out"])
    err = capsys.readouterr().err
    assert "internal error" not in err, err
    assert code == 1, err
    assert f"the bundle {job.bundle} exists already: another sweep named 'same'" in " ".join(err.split())
    assert "another --name" in err


def _live_sweep(out: str, ready: Any, stop: Any) -> None:
    def blocking(*_args: object, **_kwargs: object) -> sweep.SweepResult:
        ready.set()
        stop.wait(60)
        raise KeyboardInterrupt

    sweep.run_cells = blocking  # type: ignore[assignment]  # the sweep "runs" until told
    os._exit(main([*SWEEP, "--name", "live", "--out", out]))


def test_resume_of_a_bundle_whose_sweep_runs_is_refused_naming_it_and_a_dead_ones_lock_blocks_nothing(
        this_host: Path) -> None:
    ready, stop = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=_live_sweep, args=(str(this_host / "out"), ready, stop))
    holder.start()
    try:
        assert ready.wait(30), "the sweep did not start"
        [bundle] = list((this_host / "out").iterdir())
        with pytest.raises(TestbedError) as refused:
            sweep.resume_sweep(bundle)
        assert f"{bundle} is being written by a sweep that is still running (pid {holder.pid} on" \
            in refused.value.message
        assert refused.value.hint is not None and "Ctrl-C" in refused.value.hint
    finally:
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)  # dead, its lock file left behind
        holder.join(timeout=30)
    from orchestrator.results import bundle_lock

    assert (bundle / ".sweep.lock").exists()
    job = sweep.resume_sweep(bundle)  # the dead sweep's lock blocks nothing
    assert [c.cell_id for c in job.cells] == [c.cell_id for c in job.plan.cells()]
    bundle_lock.release_bundle(bundle)


def test_a_sweep_ended_by_ctrl_c_lets_its_bundle_go(this_host: Path) -> None:
    ready, stop = FORK.Event(), FORK.Event()
    holder = FORK.Process(target=_live_sweep, args=(str(this_host / "out"), ready, stop))
    holder.start()
    assert ready.wait(30), "the sweep did not start"
    stop.set()  # its cells end in KeyboardInterrupt, as on Ctrl-C
    holder.join(timeout=30)
    assert holder.exitcode == 130
    [bundle] = list((this_host / "out").iterdir())
    from orchestrator.results import bundle_lock

    sweep.resume_sweep(bundle)
    bundle_lock.release_bundle(bundle)
