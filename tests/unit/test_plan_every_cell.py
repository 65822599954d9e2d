"""A sweep's plan is checked cell by cell before any container, port or file of the run exists (issue 38 part 1).

Every cell is checked against every rule (orchestrator/model/plancheck.py), not the first cell alone: a plan with
impossible cells is refused in one error (exit 2) naming each with its rule, in the same words whatever the order,
with a hint naming the listed values to drop; so are `--resume` and `--plan` of a bundle recorded with such a plan.
Nothing runs: every program start (subprocess.Popen, which process.py's run and stream use) fails the test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.measure import sweep as sw
from orchestrator.model.sweep import SweepPlan
from orchestrator.results import manifest as bundles

REPRO = ["sweep", "--scenarios", "tls13-chacha20,plain", "--device-stacks", "mbedtls-3.6,mbedtls-2.28",
         "--payloads", "65", "--samples", "5", "--interval", "50ms"]
LISTED = "tls13-chacha20-65B-none-r1 (rule device-speaks-tls12)"
HINT = "drop tls13-chacha20 from --scenarios or mbedtls-2.28 from --device-stacks"


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every program this process would start (docker, compose, tshark, ansible) is recorded and refused."""
    started: list[Any] = []

    def refuse(argv: Any, *args: Any, **kwargs: Any) -> None:
        started.append(argv)
        raise AssertionError(f"a program was started before the plan was checked: {argv}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    return started


def _sweep(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("order", ["as-listed", "random", "blocked"])
def test_an_impossible_cell_anywhere_in_the_plan_is_refused_before_anything_starts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, nothing_starts: list[Any], order: str) -> None:
    out = tmp_path / "out"
    code, text = _sweep(capsys, [*REPRO, "--order", order, "--out", str(out)])
    assert code == 2, text
    assert f"error: 1 of the plan's 4 cells cannot run: {LISTED}" in text, text
    assert f"hint: {HINT}" in text, text
    assert "starting broker" not in text and "bundle:" not in text
    assert not out.exists() and nothing_starts == []


def test_the_refusal_reads_the_same_in_every_order(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   nothing_starts: list[Any]) -> None:
    said = {order: _sweep(capsys, [*REPRO, "--order", order, "--out", str(tmp_path / order)])
            for order in ("as-listed", "random", "blocked")}
    assert len(set(said.values())) == 1, said


def _recorded_bundle(tmp_path: Path, plan: SweepPlan) -> Path:
    """A bundle whose manifest records ``plan``, as a sweep of a version that checked only its first cell did."""
    bundle = tmp_path / "20260101T000000Z-old"
    bundle.mkdir()
    bundles.save_manifest(bundle, bundles.new_manifest(plan, "old", ["testbed", "sweep"], source={},
                                                        environment={}))
    return bundle


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("order", ["as-listed", "random"])
def test_resume_and_plan_of_such_a_bundle_are_refused_the_same_way(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, nothing_starts: list[Any], order: str) -> None:
    plan = SweepPlan(scenarios=["tls13-chacha20", "plain"], device_stacks=["mbedtls-3.6", "mbedtls-2.28"],
                     payloads=[65], samples=5, interval_ms=50.0, order=order)
    bundle = _recorded_bundle(tmp_path, plan)
    before = _files(bundle)
    for args in (["sweep", "--resume", str(bundle)],
                 ["sweep", "--plan", str(bundle / "manifest.json"), "--out", str(tmp_path / "rerun")]):
        code, text = _sweep(capsys, args)
        assert code == 2, (args, text)
        assert LISTED in text and HINT in text, (args, text)
        assert "starting broker" not in text and "resuming" not in text
    assert _files(bundle) == before  # the bundle is left as it was: no run folder, no manifest entry
    assert not (tmp_path / "rerun").exists() and nothing_starts == []


def test_every_impossible_cell_is_listed_with_each_of_its_rules(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, nothing_starts: list[Any]) -> None:
    """A board's sweep: TLS 1.3 is not the board's (device-speaks-tls12), a rate limit is not ours to make at its
    radio (board-rate-is-its-radio); before the serial port is opened."""
    code, text = _sweep(capsys, ["sweep", "--publisher", "esp32", "--serial-port", str(tmp_path / "no-such-tty"),
                                 "--scenarios", "plain,tls13-chacha20", "--impairments", "none,narrowband-250kbit",
                                 "--payloads", "65", "--samples", "5", "--order", "random",
                                 "--out", str(tmp_path / "out")])
    assert code == 2, text
    first = text.splitlines()[0]
    assert first.startswith("error: 3 of the plan's 4 cells cannot run: "), first
    for listed in ("plain-65B-narrowband-250kbit-r1 (rule board-rate-is-its-radio)",
                   "tls13-chacha20-65B-none-r1 (rule device-speaks-tls12)",
                   "tls13-chacha20-65B-narrowband-250kbit-r1 (rule device-speaks-tls12)",
                   "tls13-chacha20-65B-narrowband-250kbit-r1 (rule board-rate-is-its-radio)"):
        assert listed in first, first
    assert ("hint: drop tls13-chacha20 from --scenarios (rule device-speaks-tls12); drop narrowband-250kbit from "
            "--impairments (rule board-rate-is-its-radio)") in text, text
    assert "plain-65B-none-r1" not in first
    assert not (tmp_path / "out").exists() and nothing_starts == []


def test_a_lab_sweep_refuses_a_broker_to_subscriber_profile_by_cell(tmp_path: Path) -> None:
    """A lab's routers impair publisher->broker only: the profile's cells are named, not the plan's first."""
    both = tmp_path / "both-ways.yaml"
    both.write_text("delay_ms: 20\ndirection: both\n")
    plan = SweepPlan(scenarios=["plain"], impairments=["none", str(both)], payloads=[65, 100], samples=5,
                     inventory=str(tmp_path / "lab.yml"))
    with pytest.raises(sw.TestbedError) as refused:
        sw.validate_plan(plan)
    assert refused.value.message == (
        "2 of the plan's 4 cells cannot run: plain-65B-both-ways-r1 (rule lab-impairs-publisher-to-broker), "
        "plain-100B-both-ways-r1 (rule lab-impairs-publisher-to-broker)")
    assert refused.value.hint == f"drop {both} from --impairments"
    assert refused.value.exit_code == 2


def test_the_machine_is_checked_once_per_lab_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The site's and the publisher's checks (tools, images, the profile at the site, a fleet's size) run for each
    distinct scenario x profile x fleet size, not for the first cell only."""
    checked: list[tuple[str, str, int]] = []
    monkeypatch.setattr(sw, "preflight", lambda scenario, spec: checked.append((scenario.name, spec.impairment,
                                                                                spec.devices)))
    plan = SweepPlan(scenarios=["plain", "tls"], impairments=["none", "lossy-1pct"], devices=[1, 3],
                     payloads=[65, 100], repeat=2, samples=5, order="random")
    sw.preflight_plan(plan)
    assert sorted(checked) == sorted((s, i, d) for s in ("plain", "tls") for i in ("none", "lossy-1pct")
                                     for d in (1, 3))
