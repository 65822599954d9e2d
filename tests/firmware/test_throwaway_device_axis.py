"""A throwaway device axis, followed end to end in one test (issue 39 part 2's acceptance).

Its whole setup is the two edits a newcomer makes for an option that reaches the device, and nothing else:
(a) ONE row appended to the axis table (orchestrator/model/axes.py: ``AXES.with_axis``, at runtime, the row of
tests/unit/test_axes_throwaway.py) and (b) ONE line appended to a copy of device_options.def, from which vdevice, the
fleet and board-emu are built (fwtest_support.build_with_def_lines). Then a sweep listing the axis with two values
reaches each device program with its value (their own parsed configuration: --show-config, --show-run; the board's
through the RUN keys the Python side reads from that .def), and its two values are two conditions in
comparisons.csv and the report (made from synthetic run folders: no Docker).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fwtest_support import DefLinesBuild, build_with_def_lines, tree_files

from orchestrator.lab.pki import Pki
from orchestrator.model.axes import AXES
from orchestrator.model.layout import Layout
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board import protocol_def, records
from orchestrator.publishers.virtual import publisher_args
from orchestrator.report.build import build_report
from tests.unit.report.conftest import make_bundle
from tests.unit.test_axes_throwaway import THROWAWAY, Throwaway

ROW = THROWAWAY  # Axis("tw_level", int, 3, ..., ge=0, le=9, sweep=SweepOption("tw_levels", ...), device=Device(...))
DEF_LINE = "TB_OPT_UINT(tw_level, 0, 9, 3)\n"  # under the .def's last TB_PROGRAMS: vdevice, the fleet and the board


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> DefLinesBuild:
    """(b): firmware/platformio copied with DEF_LINE appended to its device_options.def; vdevice, fleet and board-emu
    built from the copy."""
    return build_with_def_lines(tmp_path_factory.mktemp("tw-axis"), DEF_LINE)


@pytest.fixture
def the_copys_def(built: DefLinesBuild, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Python side of the board protocol reads the .def the programs were built from (the copy's), as it reads
    the source tree's in a checkout: its RUN keys and their defaults come from there."""
    monkeypatch.setattr(protocol_def, "def_path", lambda: built.def_file)
    protocol_def.board_keys.cache_clear()
    protocol_def.board_defaults.cache_clear()
    yield
    protocol_def.board_keys.cache_clear()
    protocol_def.board_defaults.cache_clear()


def _shown(argv: list[str | Path]) -> dict[str, Any]:
    """A program's configuration as it parsed it (--show-config / --show-run print it as JSON)."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})
    assert (proc.returncode, proc.stderr) == (0, ""), (argv, proc.stderr)
    shown = json.loads(proc.stdout)
    assert isinstance(shown, dict)
    return shown


def _layout(root: Path) -> Layout:
    lay = Layout(root)
    lay.pki.mkdir(parents=True)
    (lay.pki / "ca.crt").write_text("CA\n")
    (lay.pki / "passwords.txt").write_text("publisher:pw\n")
    return lay


def _as_the_plans_cells(root: Path, plan: Any) -> None:
    """make_bundle's synthetic run folders (one per scenario and repeat r) become the plan's cells, as `testbed sweep`
    writes them: the cell id and spec of the plan's cell whose knob is the r-th listed value."""
    for cell in plan.cells():
        spec = plan.run_spec(cell)
        folder = root / "runs" / f"{spec.scenario}-65B-none-r{plan.tw_levels.index(spec.tw_level) + 1}"
        record = json.loads((folder / "cell.json").read_text())
        record.update(cell_id=cell.cell_id, repeat=cell.repeat, spec=spec.model_dump(mode="json"))
        (folder / "cell.json").write_text(json.dumps(record))
        folder.rename(folder.with_name(cell.cell_id))


def test_a_throwaway_device_axis_needs_only_its_row_and_its_def_line(
        built: DefLinesBuild, the_copys_def: None, tmp_path: Path) -> None:
    # The setup: (a) the row, (b) the .def line, nothing else in the tree; the two agree.
    tw = Throwaway(ROW)
    assert tw.table.axes == (*AXES.axes, ROW)
    copied = tree_files(built.copy)
    rel = str(built.def_file.relative_to(built.copy))
    assert [name for name, data in copied.items() if built.original.get(name) != data] == [rel]
    assert copied.keys() == built.original.keys() and copied[rel] == built.original[rel] + DEF_LINE.encode()
    line = protocol_def.read_def(built.def_file)[-1]
    assert (line.name, line.min, line.max, line.default) == (ROW.name, 0, 9, ROW.default)

    # A sweep listing it with two values: every cell reaches vdevice with its value.
    plan = tw.invoke("sweep", "--tw-levels", "2,5", "--scenarios", "plain,tls", "--payloads", "65")
    assert sorted(c.cell_id for c in plan.cells()) == ["plain-65B-none-tw2-r1", "plain-65B-none-tw5-r1",
                                                       "tls-65B-none-tw2-r1", "tls-65B-none-tw5-r1"]
    lay = _layout(tmp_path / "cell")
    for cell in plan.cells():
        spec = plan.run_spec(cell)
        argv = publisher_args(load_scenario(spec.scenario), lay, None, spec)
        assert argv[0] == "vdevice"
        assert _shown([built.build / "vdevice", *argv[1:], "--show-config"])["tw_level"] == spec.tw_level

    # The fleet, from its command line.
    fleet = publisher_args(load_scenario("tls"), lay, None, tw.RunSpec(scenario="tls", tw_level=8, devices=20))
    assert fleet[0] == "fleet"
    assert _shown([built.build / "fleet", *fleet[1:], "--show-config"])["tw_level"] == 8

    # board-emu, from the RUN body: tw_level is a RUN key read from the .def (not an extra key after them).
    assert p.run_keys()[-1] == "tw_level"
    board = tw.RunSpec(scenario="plain", publisher="esp32", serial_port="/dev/ttyUSB0", tw_level=4)
    run = records.run_cell(load_scenario("plain"), lay, Pki(lay.pki, "ecdsa-p256"), board, "192.0.2.1", 1883, None)
    assert (run.get("tw_level"), run.extra) == (4, ())
    body = tmp_path / "run.txt"
    body.write_bytes(p.encode_body(run))
    assert _shown([built.build / "board-emu", "--show-run", body])["tw_level"] == 4

    # The sweep's two values are two conditions in comparisons.csv and the report, never two repeats of one.
    root = tmp_path / "bundle"
    make_bundle(root, scenarios=("plain", "tls"), payloads=(65,), repeats=2, samples=60)
    _as_the_plans_cells(root, plan)
    build_report(root, table=tw.table)
    delay = pd.read_csv(root / "comparisons.csv").query("metric == 'delay_ms'")
    assert sorted(delay["connection"]) == ["tw2", "tw5"], delay[["impairment", "connection"]]
    assert list(delay["repeats_scenario"]) == [1, 1] and list(delay["n_scenario"]) == [60, 60]
    report = (root / "report.md").read_text()
    assert "none + tw2" in report and "none + tw5" in report


PLAIN_BODY = "id=c1\nhost=127.0.0.1\nport=1883\ntransport=plain\npayload=65\nsamples=3\ninterval_us=1000\nqos=0\n"


def _run(argv: list[str | Path], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_the_def_line_alone_gives_each_program_its_checks(built: DefLinesBuild, tmp_path: Path) -> None:
    """What the .def line makes of the option by itself in each program: vdevice's and the fleet's --tw-level and
    TESTBED_TW_LEVEL, the .def's default when not given, the range refused with its error, the option in
    --describe-options and --help; the board's RUN key, its default and its range."""
    build = built.build
    fleet = [build / "fleet", "--devices", "2", "--out-dir", tmp_path / "o"]
    for argv, name in (([build / "vdevice"], "vdevice"), (fleet, "fleet")):
        ok = _run([*argv, "--check", "--tw-level", "5"])
        assert (ok.returncode, ok.stdout, ok.stderr) == (0, "ok\n", ""), name
        assert _shown([*argv, "--show-config"])["tw_level"] == 3  # the .def's default
        assert json.loads(_run([*argv, "--show-config"], {"TESTBED_TW_LEVEL": "9"}).stdout)["tw_level"] == 9
        bad = _run([*argv, "--check", "--tw-level", "10"])
        assert (bad.returncode, bad.stderr) == (
            2, f'{name}: error InvalidArgument: --tw-level: expected an integer 0..9, got "10"\n')
        described = json.loads(_run([*argv, "--describe-options"]).stdout)
        assert described[-1] == {"name": "tw_level", "kind": "uint", "min": 0, "max": 9, "default": 3,
                                 "choices": None, "programs": ["vdevice", "fleet", "board"]}
        assert "--tw-level 0..9" in _run([*argv, "--help"]).stdout
    body = tmp_path / "run.txt"
    body.write_text(PLAIN_BODY)
    assert _shown([build / "board-emu", "--show-run", body])["tw_level"] == 3
    body.write_text(PLAIN_BODY + "tw_level=10\n")
    bad = _run([build / "board-emu", "--check-run", body])
    assert (bad.returncode, bad.stderr) == (
        2, 'board-emu: error InvalidArgument: RUN body key "tw_level": "10" is not an integer 0..9\n')
