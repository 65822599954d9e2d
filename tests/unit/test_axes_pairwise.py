"""Every pair of axis values either builds a run (and a sweep) or is refused by a named rule.

The values of each axis come from the table (orchestrator/model/axes.py): every choice, both ends of a
range and the default, None and a value for an optional one; and the variants that are not one axis: the
publisher (one virtual device, a fleet, a board) and the site (this host, a lab inventory). For every pair
the RunSpec and the SweepPlan are built, and the rules on the scenario and the impairment profile applied; a
refusal must be a rule of orchestrator/model/rules.py, named at the end of its message, never a crash or a
bare pydantic message. A run that is built also gives its device
command line (vdevice or the fleet) or its board RUN body.
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.lab.pki import Pki
from orchestrator.model import impairment, rules
from orchestrator.model.axes import AXES, MAX_DEVICES_PER_HOST, Axis
from orchestrator.model.layout import Layout
from orchestrator.model.rules import rule_names
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import records
from orchestrator.publishers.virtual import publisher_args

BASE = {"scenario": "tls"}
VARIANTS: dict[str, list[dict[str, Any]]] = {  # what is not one axis's value
    "publisher": [{}, {"devices": 10}, {"publisher": "esp32", "serial_port": "/dev/ttyUSB0"}],
    "site": [{}, {"inventory": "/lab/inventory.yml"}],
    "scenario": [{"scenario": s} for s in ("plain", "tls", "tls13-chacha20")],
    "impairment": [{"impairment": name} for name in impairment.builtin_names()],
}
RULE = re.compile(r"\(rule ([a-z0-9-]+)\)$")
EXAMPLES: dict[str, list[Any]] = {  # free-text axes: a value besides the default; a ranged axis's value within
    "events": ["broker-restart@5s,link-down@9s:1s"],
    "devices": [MAX_DEVICES_PER_HOST],  # the largest fleet one host runs (the range's end needs a lab and a payload)
}


def _ends(axis: Axis) -> list[Any]:
    low = axis.ge if axis.ge is not None else (axis.gt or 0) + (1 if axis.type is int else 0.5)
    values = [low, axis.default, axis.le]
    return [axis.type(v) for v in values if v is not None]


def axis_values(axis: Axis) -> list[Any]:
    if axis.choices is not None:
        return list(axis.choices)
    if axis.type is bool:
        return [False, True]
    if axis.default is None:
        return [None, f"/tmp/{axis.name}"]
    if axis.bounds():
        return _ends(axis) + EXAMPLES.get(axis.name, [])
    return ([axis.default] if axis.default is not ... else []) + EXAMPLES.get(axis.name, [])


def variants() -> list[tuple[str, dict[str, Any]]]:
    out = [(name, v) for name, vs in VARIANTS.items() for v in vs]
    for axis in AXES:
        if axis.name not in VARIANTS:
            out += [(axis.name, {axis.name: v}) for v in axis_values(axis)]
    return out


PAIRS = [(a, b) for (na, a), (nb, b) in itertools.combinations(variants(), 2) if na != nb]


def _refused_by_a_rule(exc: ValidationError) -> set[str]:
    names = set()
    for err in exc.errors():
        assert err["type"] == "value_error", f"not a named rule: {err}"
        m = RULE.search(str(err["msg"]))
        assert m and m.group(1) in rule_names(AXES), f"not a named rule: {err['msg']}"
        names.add(m.group(1))
    return names


def _run_values(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if AXES[k].in_run}


def _plan_values(values: dict[str, Any]) -> dict[str, Any]:
    plan = {}
    for name, v in values.items():
        axis = AXES[name]
        if axis.in_sweep:
            plan[axis.sweep.name if axis.sweep else name] = [v] if axis.sweep else v
    return plan


@pytest.fixture(scope="module")
def lay(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    lay = Layout(tmp_path_factory.mktemp("pairs") / "cell-1")
    lay.pki.mkdir(parents=True)
    (lay.pki / "ca.crt").write_text("CA\n")
    (lay.pki / "passwords.txt").write_text("publisher:pw\n")
    return lay


scenario_named = functools.lru_cache(load_scenario)
profile_named = functools.lru_cache(impairment.load_impairment)


def _device_input(spec: RunSpec, lay: Layout) -> list[str] | bytes:
    scenario = scenario_named(spec.scenario)
    if spec.publisher == "esp32":
        cell = records.run_cell(scenario, lay, Pki(lay.pki, "ecdsa-p256"), spec, "192.0.2.1", scenario.port, None)
        return p.encode_body(cell)
    return publisher_args(scenario, lay, None, spec)


def test_there_are_enough_pairs() -> None:
    assert len(PAIRS) > 1000


def _run(values: dict[str, Any], lay: Layout) -> set[str]:
    """The rules that refuse these run values (the spec's, then the scenario's once read); none: it builds,
    and so do its device command line or RUN body."""
    try:
        spec = RunSpec(**_run_values(values))
    except ValidationError as exc:
        return _refused_by_a_rule(exc)
    try:  # the rules on the scenario and the impairment profile, once read (the run's preflight)
        rules.check_scenario(scenario_named(spec.scenario), spec.values())
        rules.check_profile(profile_named(spec.impairment), spec.values())
    except rules.RuleViolation as exc:
        assert RULE.search(str(exc)), exc
        return {exc.rule}
    assert _device_input(spec, lay)
    return set()


def _sweep(values: dict[str, Any]) -> set[str]:
    try:
        plan = SweepPlan(**_plan_values(values))
    except ValidationError as exc:
        return _refused_by_a_rule(exc)
    # every cell's run builds (else refused before it starts); the repeats differ only in the seed
    assert [plan.run_spec(c) for c in plan.cells() if c.repeat in (1, plan.repeat)]
    return set()


def test_every_pair_builds_or_is_refused_by_a_named_rule(lay: Layout) -> None:
    built = refused = 0
    seen_rules: set[str] = set()
    for a, b in PAIRS:
        values = BASE | a | b
        run_refused = _run(values, lay)
        seen_rules |= run_refused | _sweep(values)
        built, refused = built + (not run_refused), refused + bool(run_refused)
    assert built > refused > 0
    assert seen_rules == rule_names(AXES) - set(THREE_VALUES), f"rules no pair reached: {rule_names(AXES) - seen_rules}"


THREE_VALUES = {  # the rules that take three values to break, each with a combination that breaks it
    "board-delays-at-the-broker": {"publisher": "esp32", "serial_port": "/dev/ttyUSB0", "delay_mechanism": "netem",
                                   "impairment": "wifi-good"},
    "lab-impairs-publisher-to-broker": {"inventory": "/lab/inventory.yml", "impairment": "both.yaml"},
    "rabbitmq-tls-it-can-express": {"broker": "rabbitmq", "scenario": "tls13-chacha20", "device_stack": "mbedtls-3.6",
                                    "connection": "resume-id"},
}


def test_the_rules_that_take_three_values(lay: Layout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("both.yaml").write_text("description: both ways\ndelay_ms: 5\ndirection: both\n")
    for rule, values in THREE_VALUES.items():
        assert _run(BASE | values, lay) == {rule}
