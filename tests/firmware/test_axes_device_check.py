"""Every pair of axis values that the Python side lets run is accepted by the device's own parser, and
what a rule on the scenario refuses the device refuses too.

tests/unit/test_axes_pairwise.py builds a RunSpec for every pair of axis values and variants; here the
command line each one gives (orchestrator/publishers/virtual.py: vdevice or the fleet) goes to the
program's check mode (`vdevice --check`, `fleet --check`: options and files checked, nothing sent), and a
board's RUN body (orchestrator/publishers/board/records.py) to `board-emu --check-run`, the board's RUN
parser. "Valid" is what the device says, not what Python assumes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fwtest_support import Build36, HostBuild, Pki
from pydantic import ValidationError

from orchestrator.lab.pki import Pki as LabPki
from orchestrator.model import rules
from orchestrator.model.layout import DATA, Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import records
from orchestrator.publishers.virtual import publisher_args
from tests.unit.test_axes_pairwise import BASE, PAIRS, _run_values


def _valid_specs() -> list[RunSpec]:
    specs: dict[str, RunSpec] = {}
    for a, b in PAIRS:
        try:
            spec = RunSpec(**_run_values(BASE | a | b))
        except ValidationError:
            continue
        specs[spec.model_dump_json()] = spec
    return list(specs.values())


@pytest.fixture
def lay(tmp_path: Path, pki: Pki) -> Layout:
    lay = Layout(tmp_path / "cell-1")
    for folder in (lay.pki, lay.keylogs, lay.logs, lay.fleet_dir):
        folder.mkdir(parents=True, exist_ok=True)
    (lay.pki / "ca.crt").write_bytes(pki.ca.read_bytes())
    (lay.pki / "passwords.txt").write_text("publisher:pw\n")
    return lay


def _check(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})


def _device_check(spec: RunSpec, host_build: HostBuild, build36: Build36, lay: Layout,
                  path: Path) -> subprocess.CompletedProcess[str]:
    scenario = load_scenario(spec.scenario)
    if spec.publisher == "esp32":
        cell = records.run_cell(scenario, lay, LabPki(lay.pki, "ecdsa-p256"), spec, "192.0.2.1", scenario.port, None)
        path.write_bytes(p.encode_body(cell))
        return _check([str(host_build.board_emu), "--check-run", str(path)])
    args = [a.replace(f"{DATA}/", f"{lay.root}/") for a in publisher_args(scenario, lay, None, spec)]
    if spec.device_stack == "mbedtls-3.6":  # the device on its own stack: its image's build
        program = build36.vdevice if args[0] == "vdevice" else build36.fleet
    else:
        program = host_build.vdevice if args[0] == "vdevice" else host_build.build_dir / "fleet"
    return _check([str(program), "--check", *args[1:]])


def _scenario_rule(spec: RunSpec) -> str | None:
    try:
        rules.check_scenario(load_scenario(spec.scenario), spec.values())
    except rules.RuleViolation as exc:
        return exc.rule
    return None


def test_every_valid_pair_passes_the_devices_check(host_build: HostBuild, build36: Build36, lay: Layout,
                                                   tmp_path: Path) -> None:
    specs = _valid_specs()
    assert len(specs) > 100
    disagree: list[str] = []
    refused_by_rule = 0
    for n, spec in enumerate(specs):
        proc = _device_check(spec, host_build, build36, lay, tmp_path / f"run-{n}.txt")
        rule = _scenario_rule(spec)
        refused_by_rule += rule is not None
        if rule is None and (proc.returncode, proc.stdout) != (0, "ok\n"):
            disagree.append(f"{spec!r}: the device refuses: {proc.returncode} {proc.stdout} {proc.stderr.strip()}")
        if rule is not None and proc.returncode != 2:
            disagree.append(f"{spec!r}: rule {rule} refuses, the device says {proc.returncode} {proc.stdout}")
    assert disagree == [], f"{len(disagree)} of {len(specs)}:\n" + "\n".join(disagree[:10])
    assert 0 < refused_by_rule < len(specs)
