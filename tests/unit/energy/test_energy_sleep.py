"""A board that sleeps, in the energy model (issue 42 part 2 and acceptance item 2): a cell records its sleep mode
and power save (cell.json spec), and the model uses them: the cell's power save for the connected idle, its sleep
mode's rows marked as the one it ran, the deep sleep's wake (boot, association, DHCP) in each deep row, every
figure labelled modelled with every parameter's source. A lifecycle sweep with and without sleep (plain and tls;
persistent, reconnect, resume-ticket; stay and deep) shows energy per reading and battery life for every mode."""

from __future__ import annotations

import json
from pathlib import Path

from energy_helpers import board_timed_run, fixture_kinds, persistent_run

from orchestrator.analysis import energymodel as em
from orchestrator.model.cell import CellRecord
from orchestrator.report.document import Table, render_markdown
from orchestrator.report.energy import energy_section
from orchestrator.report.loader import Cell
from orchestrator.runanalysis.energy import modelled, run_facts

MODELLED = "Energy per reading and battery life per connection kind and sleep mode (modelled)"


def _ran_with(folder: Path, *, board: bool = False, **spec: str) -> Path:
    cell = json.loads((folder / "cell.json").read_text())
    cell["spec"] |= spec
    if not board:
        cell.pop("board")
    (folder / "cell.json").write_text(json.dumps(cell))
    return folder


def test_the_cells_own_sleep_mode_and_power_save(tmp_path: Path) -> None:
    run = _ran_with(board_timed_run(tmp_path / "deep", fixture_kinds("t12_ticket")), connection="resume-ticket",
                    sleep_mode="deep", power_save="modem-sleep")
    facts = run_facts(run)
    assert (facts.sleep_mode, facts.power_save) == ("deep", "modem-sleep")
    model = em.load_energy_model()
    block = modelled(facts, model)
    assert block["label"] == "modelled" and block["power_save"] == "modem-sleep"
    assert "virtual device ran with sleep mode deep, power save modem-sleep" in block["note"]
    assert {r["sleep"] for r in block["rows"] if r["ran"]} == {"deep-sleep"}
    for r in block["rows"]:
        wake = r["phases_mc_per_connection"]["association"]
        assert (wake > 0) == (r["sleep"] == "deep-sleep")  # association + DHCP per wake from deep sleep only
        assert r["label"] == "modelled" and r["battery_life_days"] > 0
    # the cell's power save is the model's: modem-sleep's idle is below the radio-on one
    on = modelled(facts, model, power_save="none")
    idle = {b["power_save"]: [r["phases_mc_per_connection"]["idle"] for r in b["rows"]] for b in (block, on)}
    assert all(m < n for m, n in zip(idle["modem-sleep"], idle["none"], strict=True))
    assert set(block["sources"]) >= {"deep_sleep_ma", "light_sleep_ma", "modem_sleep_ma", "association_ms",
                                     "dhcp_ms", "boot_ms"} and all(block["sources"].values())


def _cell(folder: Path, scenario: str, connection: str, sleep: str) -> Cell:
    cell_id = "-".join(p for p in (scenario, "65B-none", "" if connection == "persistent" else connection,
                                   "" if sleep == "stay" else f"{sleep}sleep") if p)
    return Cell(record=CellRecord(cell_id=cell_id, scenario=scenario, payload=65, status="ok"), folder=folder)


def test_a_lifecycle_sweep_with_and_without_sleep(tmp_path: Path) -> None:
    cells = []
    for scenario in ("plain", "tls"):
        tls = scenario == "tls"
        cells.append(_cell(_ran_with(persistent_run(tmp_path / f"{scenario}-p", tls=tls)), scenario, "persistent",
                           "stay"))
        for connection in ("reconnect", "resume-ticket"):
            tls_kinds = ["full"] * 3 if connection == "reconnect" else fixture_kinds("t12_ticket")
            kinds = tls_kinds if tls else ["none"] * 3
            for sleep in ("stay", "deep"):
                folder = board_timed_run(tmp_path / f"{scenario}-{connection}-{sleep}", kinds)
                cells.append(_cell(_ran_with(folder, connection=connection, sleep_mode=sleep), scenario, connection,
                                   sleep))
    blocks = energy_section(cells, {})
    table = next(b for b in blocks if isinstance(b, Table) and b.caption == MODELLED)
    assert [c for c in table.columns if "(modelled)" in c] == ["mJ per reading (modelled)",
                                                               "battery life, days (modelled)"]
    by_cell: dict[str, list[tuple[str, ...]]] = {}
    for row in table.rows:
        by_cell.setdefault(row[0], []).append(row)
    assert set(by_cell) == {c.record.cell_id for c in cells}  # every cell of the sweep
    for cell_id, rows in by_cell.items():
        kinds = {r[1] for r in rows}
        assert {r[3].removesuffix(" (the cell's)") for r in rows} == set(em.SLEEP_MODES)  # every sleep mode
        assert len(rows) == len(kinds) * len(em.SLEEP_MODES)
        own = {r[3] for r in rows if r[3].endswith("(the cell's)")}
        assert own == {("deep-sleep" if cell_id.endswith("deepsleep") else "stay-connected") + " (the cell's)"}
        assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in rows)
    assert {r[1] for r in table.rows} == {"plain", "TLS full", "TLS resumed-ticket"}
    sources = next(b for b in blocks if isinstance(b, Table) and (b.caption or "").startswith("The energy model's"))
    assert {r[0] for r in sources.rows} >= set(em.SCALARS) and all(r[2] for r in sources.rows)
    assert "MODELLED" in render_markdown(blocks)
