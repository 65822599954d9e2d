"""Every number read from a scenario, an impairment profile, a grading table, a lab inventory or the run's options is
finite (issue 38 part 1): YAML's `.nan`, `.inf` and `-.inf` are numbers that a range check lets through (NaN
compares false with every bound), so each is refused by the field's name and the file's, "is not a finite number".
A NaN delay once ran a cell under the profile's name with no delay at all.
"""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import yaml

from orchestrator.analysis.grading import load_table
from orchestrator.backends.impairment.targets import parse_inventory_listing
from orchestrator.cli.main import main
from orchestrator.errors import TestbedError
from orchestrator.model.events import parse_events
from orchestrator.model.impairment import load_impairment
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan
from orchestrator.model.yamlfile import user_input

NOT_FINITE = ("nan", "inf", "-inf")
YAML = {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}


def _said(exc: TestbedError) -> str:
    return f"{exc.message}\n{exc.evidence or ''}"


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("field", ["delay_ms", "jitter_ms", "loss_pct", "loss_correlation_pct", "rate_kbit"])
def test_an_impairment_profile_refuses_a_number_that_is_not_finite(tmp_path: Path, field: str, value: str) -> None:
    others = {"delay_ms": "delay_ms: 50\n", "jitter_ms": "jitter_ms: 5\n",
              "loss_correlation_pct": "loss_pct: 1\n"}  # so that only the field under test is wrong
    path = tmp_path / "bad.yaml"
    path.write_text("".join(v for k, v in others.items() if k != field) + f"{field}: {YAML[value]}\n")
    with pytest.raises(TestbedError) as refused:
        load_impairment(str(path))
    assert f"{path}:" in _said(refused.value)
    assert f"{field}: is not a finite number (got {value})" in _said(refused.value), _said(refused.value)


@pytest.mark.parametrize("value", NOT_FINITE)
def test_a_scenario_refuses_a_number_that_is_not_finite(tmp_path: Path, value: str) -> None:
    data = yaml.safe_load((resources.files("orchestrator.scenarios") / "tls.yaml").read_text())
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**data, "name": "mine"}).replace(f"port: {data['port']}", f"port: {YAML[value]}"))
    with pytest.raises(TestbedError) as refused:
        load_scenario(str(path))
    assert f"{path}:" in _said(refused.value) and "port: is not a finite number" in _said(refused.value)


def _table(tmp_path: Path, name: str, where: str, value: str) -> Path:
    data = yaml.safe_load((resources.files("orchestrator.grading") / f"{name}.yaml").read_text())
    if where == "band":
        data["criteria"][next(iter(data["criteria"]))]["bands"][0]["upper"] = float(value)
    elif where == "overall":
        data["overall"][0]["upper"] = float(value)
    else:
        data["requirements"][next(iter(data["requirements"]))]["value"] = float(value)
    path = tmp_path / f"{name}-{where}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize(("name", "where", "field"), [("tiphon", "band", "bands.0.upper"),
                                                       ("tiphon", "overall", "overall.0.upper"),
                                                       ("g1010", "requirement", ".value")])
def test_a_grading_table_refuses_a_threshold_that_is_not_finite(tmp_path: Path, name: str, where: str, field: str,
                                                                value: str) -> None:
    path = _table(tmp_path, name, where, value)
    with pytest.raises(TestbedError) as refused:
        load_table(path)
    assert refused.value.message.startswith(f"{path}: invalid grading table: ")
    assert f"{field}: is not a finite number (got {value})" in refused.value.message, refused.value.message


@pytest.mark.parametrize("value", NOT_FINITE)
def test_a_lab_inventory_refuses_a_number_that_is_not_finite(value: str) -> None:
    """As `ansible-inventory --list` prints a YAML inventory's `.nan` (JSON's NaN, Infinity)."""
    literal = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[value]
    text = json.dumps({"broker": {"hosts": ["b1"]}, "publisher": {"hosts": ["p1"]}, "router": {"hosts": ["r1"]},
                       "_meta": {"hostvars": {"b1": {"ansible_port": float(value)}, "p1": {},
                                              "r1": {"impair_egress_interface": "eth1",
                                                     "limits": {"burst": [1, float(value)]}}}}})
    assert literal in text  # JSON as Python's (and Ansible's) encoder writes it
    listing = json.loads(text)
    with pytest.raises(TestbedError) as refused:
        parse_inventory_listing(listing, "lab.yml")
    assert refused.value.message == "lab.yml: invalid lab inventory"
    assert refused.value.evidence == (f"b1: ansible_port: is not a finite number (got {value})\n"
                                      f"r1: limits.burst[1]: is not a finite number (got {value})")


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("field", ["interval_ms", "sleep_ms", "connect_rate", "reconnect_base_ms"])
def test_a_run_or_a_recorded_plan_refuses_a_number_that_is_not_finite(field: str, value: str) -> None:
    """A plan read back from a manifest (`--plan`, `--resume`) or given on the command line."""
    with pytest.raises(TestbedError) as refused, user_input("plan in manifest.json"):
        SweepPlan.model_validate({field: float(value)})
    assert refused.value.message == f"invalid plan in manifest.json: {field}: is not a finite number (got {value})"


def test_an_event_time_too_long_to_be_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a finite number"):
        parse_events("broker-kill@" + "9" * 400 + "s")


def test_a_run_with_a_nan_profile_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's finding: `delay_ms: .nan` ran, applied nothing and recorded the profile's name. No program may
    start (docker, compose): a regression fails here instead of running a cell."""
    started: list[object] = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, *a, **k: started.append(argv) or 1 / 0)
    profile = tmp_path / "nan-delay.yaml"
    profile.write_text("delay_ms: .nan\n")
    run_dir = tmp_path / "run"
    code = main(["run", "--scenario", "plain", "--samples", "5", "--impairment", str(profile), "--out", str(run_dir)])
    text = capsys.readouterr().err
    assert code == 1, text
    assert f"{profile}:1: delay_ms: is not a finite number (got nan)" in text, text
    assert "starting broker" not in text and not run_dir.exists() and started == []
