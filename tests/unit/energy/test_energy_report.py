"""The report's "What TLS costs the battery" (issue 42, part 5): modelled and measured apart, every modelled figure
labelled modelled, every parameter's source, the break-even K in energy beside the one in bytes."""

from __future__ import annotations

from pathlib import Path

from energy_helpers import board_timed_run, fixture_kinds

from orchestrator.analysis.synthtrace import synthesize, write_ppk2
from orchestrator.model.cell import CellRecord
from orchestrator.report.document import Heading, Table, render_markdown
from orchestrator.report.energy import TITLE, energy_section
from orchestrator.report.loader import Cell
from orchestrator.runanalysis.energy import run_facts
from orchestrator.runanalysis.energyimport import import_trace, run_connections


def _cell(folder: Path, cell_id: str, scenario: str) -> Cell:
    record = CellRecord(cell_id=cell_id, scenario=scenario, payload=100, status="ok")
    return Cell(record=record, folder=folder)


def test_the_section_keeps_modelled_and_measured_apart(tmp_path: Path) -> None:
    plain = _cell(board_timed_run(tmp_path / "plain", ["none"] * 3), "plain-100B-reconnect", "plain")
    tls_run = board_timed_run(tmp_path / "tls", fixture_kinds("t12_session_id"))
    tls = _cell(tls_run, "tls-100B-resume-id", "tls")
    syn = synthesize(run_connections(tls_run), run_facts(tls_run).readings)
    import_trace(tls_run, write_ppk2(syn.trace, tmp_path / "trace.csv"), "ppk2")

    blocks = energy_section([plain, tls], {})
    assert isinstance(blocks[0], Heading) and blocks[0].text == TITLE
    tables = {b.caption: b for b in blocks if isinstance(b, Table)}
    modelled = tables["Energy per reading and battery life per connection kind and sleep mode (modelled)"]
    assert [c for c in modelled.columns if "mJ" in c or "days" in c] == [
        "mJ per reading (modelled)", "battery life, days (modelled)"]
    assert {(r[0], r[1]) for r in modelled.rows} == {("plain-100B-reconnect", "plain"),
                                                      ("tls-100B-resume-id", "TLS full"),
                                                      ("tls-100B-resume-id", "TLS resumed-id")}
    even = tables["Break-even K, bytes and energy"]
    assert all(c.endswith("(modelled)") for c in even.columns[5:]) and "(measured)" in even.columns[4]
    assert {r[3] for r in even.rows} == {"full handshake", "resumed (id)"}
    sources = next(t for c, t in tables.items() if c and c.startswith("The energy model's parameters"))
    assert {r[0] for r in sources.rows} >= {"tx_ma", "rx_ma", "deep_sleep_ma", "handshake_compute_ms"}
    assert all(r[2] for r in sources.rows)
    measured = tables["Measured from an imported power trace"]
    assert [r[0] for r in measured.rows] == ["tls-100B-resume-id"]  # only the cell with a trace
    assert measured.rows[0][2] == "marker"
    text = render_markdown(blocks)
    assert "the one it ran with (--sleep-mode)" in text and "MODELLED" in text


def test_no_trace_says_so_and_no_cell_no_section(tmp_path: Path) -> None:
    plain = _cell(board_timed_run(tmp_path / "plain", ["none"] * 2), "plain-100B-reconnect", "plain")
    text = render_markdown(energy_section([plain], {}))
    assert "no cell of this bundle has an imported power trace" in text
    assert energy_section([], {}) == []
