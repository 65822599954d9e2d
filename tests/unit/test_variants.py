"""A cell's variants sit behind two interfaces chosen once from the spec: the publisher variant
(orchestrator/publishers/variants.py: virtual device, fleet, board) and the site (orchestrator/measure/site.py:
this host, a lab inventory). The cell's lifecycle in orchestrator/measure/, the analysis in orchestrator/analysis/
and of a run folder in orchestrator/runanalysis/, and the lab's hosts (orchestrator/lab/) never ask which one they
have: no ``.is_fleet``, no ``inventory is (not) None``, no ``"esp32"`` outside the two factories (read with ``ast``).
The analysis asks the keying the publisher variant hands it (orchestrator/analysis/keying.py) instead; the lab is
handed the variant's program and folders.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator.analysis.keying import ONE_DEVICE, DeviceFleet
from orchestrator.measure.local import ThisHost
from orchestrator.measure.multihost import LabSite
from orchestrator.measure.site import site_for
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.publishers.variants import BOARD, FLEET, VIRTUAL, variant_for

REPO = Path(__file__).resolve().parents[2]
MEASURE = REPO / "orchestrator" / "measure"
RUNANALYSIS = REPO / "orchestrator" / "runanalysis"
ANALYSIS = REPO / "orchestrator" / "analysis"
LAB = REPO / "orchestrator" / "lab"
FACTORIES = {"site_for", "variant_for"}  # the one place each choice is made
# Modules of measure/, runanalysis/ or analysis/ still branching on a variant: {"file name": why}. Keep it EMPTY;
# say why for each entry.
STILL_BRANCHING: dict[str, str] = {}


def _branches(path: Path) -> list[str]:
    """Every test of a variant in ``path``: attribute is_fleet, a comparison of ``inventory`` with None, "esp32"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in FACTORIES:
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if line in skip:
            continue
        if isinstance(node, ast.Attribute) and node.attr == "is_fleet":
            found.append(f"{path.name}:{line}: .is_fleet")
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "inventory" \
                and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators):
            found.append(f"{path.name}:{line}: inventory compared with None")
        elif isinstance(node, ast.Constant) and node.value == "esp32":
            found.append(f"{path.name}:{line}: \"esp32\"")
    return found


def _modules() -> list[Path]:
    return sorted([*MEASURE.glob("*.py"), *RUNANALYSIS.glob("*.py"), *ANALYSIS.rglob("*.py"), *LAB.rglob("*.py")])


def test_the_cells_lifecycle_the_analysis_and_the_lab_ask_no_variant() -> None:
    found = [b for path in _modules() if path.name not in STILL_BRANCHING for b in _branches(path)]
    assert found == [], "a variant's branch in the cell's lifecycle, the analysis or the lab (move it behind " \
                        "publishers/variants.py, measure/site.py or analysis/keying.py):\n" + "\n".join(found)
    stale = [name for name in STILL_BRANCHING if not any(_branches(p) for p in _modules() if p.name == name)]
    assert stale == [], f"STILL_BRANCHING names modules that no longer branch (remove them): {stale}"


def test_the_check_sees_each_kind_of_branch(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("def f(spec):\n    return spec.is_fleet or spec.inventory is None or spec.publisher == 'esp32'\n"
                    "def site_for(inventory):\n    return inventory is None\n")
    assert _branches(path) == ['x.py:2: .is_fleet', 'x.py:2: inventory compared with None', 'x.py:2: "esp32"']


@pytest.mark.parametrize("spec,variant", [
    (RunSpec(scenario="tls"), VIRTUAL),
    (RunSpec(scenario="tls", devices=20), FLEET),
    (RunSpec(scenario="tls", publisher="esp32", serial_port="/dev/ttyUSB0"), BOARD),
])
def test_the_publisher_variant_is_chosen_from_the_spec(spec: RunSpec, variant: object) -> None:
    assert variant_for(spec) is variant


def test_the_site_is_chosen_from_the_inventory(tmp_path: Path) -> None:
    assert isinstance(site_for(None), ThisHost)
    lab = site_for(str(tmp_path / "lab.yml"))
    assert isinstance(lab, LabSite) and lab.inventory == tmp_path / "lab.yml"
    assert ThisHost().more_metrics is None and lab.more_metrics is not None  # a lab adds its host clock


def test_the_publisher_variant_hands_the_analysis_its_keying(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    fleet_spec = RunSpec(scenario="tls", devices=20)
    assert VIRTUAL.keying(RunSpec(scenario="tls"), lay) is ONE_DEVICE
    assert BOARD.keying(RunSpec(scenario="tls", publisher="esp32", serial_port="/dev/ttyUSB0"), lay) is ONE_DEVICE
    assert FLEET.keying(fleet_spec, lay) == DeviceFleet(20, None)  # no send-log folder written yet
    lay.fleet_dir.mkdir(parents=True)
    assert FLEET.keying(fleet_spec, lay) == DeviceFleet(20, lay.fleet_dir)


def test_a_lab_host_makes_the_folders_the_variants_program_writes(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    assert VIRTUAL.device_folders(lay) == () and BOARD.device_folders(lay) == ()
    assert FLEET.device_folders(lay) == (lay.fleet_dir,)


def test_the_fleets_publisher_host_gets_its_device_log_folder_and_a_single_devices_does_not(tmp_path: Path) -> None:
    from orchestrator.lab import remote
    from tests.unit.test_multihost import _cell, _members

    lab, sc, lay, pki, spec = _cell(tmp_path, "tls")
    fleet_spec = spec.model_copy(update={"devices": 20})
    single = _members(remote.stage(lay, sc, spec, lab, pki, VIRTUAL.device_folders(lay))["p1"])
    fleet = _members(remote.stage(lay, sc, fleet_spec, lab, pki, FLEET.device_folders(lay))["p1"])
    assert "run/logs/fleet" in fleet and "run/logs/fleet" not in single
    assert set(fleet) - set(single) == {"run/logs/fleet"}
