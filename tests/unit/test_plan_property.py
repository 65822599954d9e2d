"""Property (issue 38 part 1): a sweep's plan is refused exactly when one of its cells would be refused as a run.

For random plans (scenarios, device stacks, profiles - one of them broker->subscriber -, publisher, lab or this
host, mechanism, fleet sizes, repeats, order) `validate_plan` accepts the plan iff every cell passes the checks its
own `testbed run` makes before anything starts (RunSpec's rules, the scenario's, the profile's); when it refuses,
the cells it names are exactly the cells that fail them. This host's kernel checks are stubbed (they probe a helper
container); everything else is the real code.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator.errors import TestbedError
from orchestrator.measure import local
from orchestrator.measure import sweep as sw
from orchestrator.measure.run import check_publisher_can_speak
from orchestrator.model import rules
from orchestrator.model.impairment import builtin_names as builtin_profiles
from orchestrator.model.impairment import load_impairment
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import builtin_names as builtin_scenarios
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan

BOTH_WAYS = Path(__file__).resolve().parents[1] / "fixtures" / "impairments" / "both-ways.yaml"  # a lab refuses it


def _subset(values: list[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=len(values), unique=True)


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    """A plan's options that SweepPlan itself accepts (its lists' rules hold); the cells' rules may not."""
    scenarios = draw(_subset(builtin_scenarios()))
    where = draw(st.sampled_from(["virtual", "esp32", "lab"]))
    given_: dict[str, Any] = {
        "scenarios": scenarios, "baseline": scenarios[0], "payloads": draw(_subset([65, 100])),
        "impairments": draw(_subset([*builtin_profiles(), str(BOTH_WAYS)])), "samples": 5,
        "repeat": draw(st.integers(1, 2)), "order": draw(st.sampled_from(["blocked", "random", "as-listed"])),
        "delay_mechanism": draw(st.sampled_from(["auto", "netem"] + ([] if where == "lab" else ["queue"])))}
    if where == "esp32":  # a board runs its own stack, alone, on this host
        given_ |= {"publisher": "esp32", "serial_port": "/dev/ttyUSB9"}
    else:
        given_ |= {"device_stacks": draw(_subset(["mbedtls-2.28", "mbedtls-3.6"])) if where == "virtual" else
                   ["mbedtls-2.28"], "devices": draw(_subset([1, 3]))}
    if where == "lab":
        given_["inventory"] = "/nonexistent/lab.yml"
    return given_


scenario_of = functools.cache(load_scenario)  # the files do not change during the test
profile_of = functools.cache(load_impairment)


def refused_as_a_run(plan: SweepPlan, cell: Any) -> bool:
    """What the cell's own `testbed run` refuses before anything starts (measure/run.py's preflight: the run's
    values, the scenario; the profile's rules, as a board's and a lab's preflight check them)."""
    try:
        spec = RunSpec(**plan.run_spec(cell).values())
        check_publisher_can_speak(scenario_of(spec.scenario), spec)
        rules.check_profile(profile_of(spec.impairment), spec.values())
    except (TestbedError, rules.RuleViolation, ValueError):
        return True
    return False


def validated(plan: SweepPlan) -> TestbedError | None:
    """What `validate_plan` says of ``plan``: None (accepted) or its refusal."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local, "check_supported", lambda *a, **k: None)  # this kernel's netem and nft: not the rules
        try:
            sw.validate_plan(plan)
        except TestbedError as exc:
            return exc
    return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_a_plan_the_validator_accepts_has_no_cell_a_run_would_refuse(options: dict[str, Any]) -> None:
    plan = SweepPlan(**options)
    if validated(plan) is None:
        event("accepted")
        bad = sorted(c.cell_id for c in plan.cells() if refused_as_a_run(plan, c))
        assert not bad, f"accepted a plan with cells refused as runs: {bad}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_a_plan_is_refused_iff_a_cell_of_it_would_be_and_names_them_all(options: dict[str, Any]) -> None:
    plan = SweepPlan(**options)
    bad = {c.cell_id for c in plan.cells() if refused_as_a_run(plan, c)}
    refused = validated(plan)
    if refused is None:
        assert not bad, f"accepted a plan with cells refused as runs: {sorted(bad)}"
        return
    event("refused")
    named = set(re.findall(r"([\w.-]+-r\d+) \(rule [\w-]+\)", refused.message))  # each cell with its rule
    assert bad, f"refused a plan whose every cell runs: {refused.message}"
    assert named == bad, (refused.message, sorted(bad))
    assert refused.exit_code == 2
