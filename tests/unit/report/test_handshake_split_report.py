"""The report's handshake split (report/handshake_split.py): per device stack, TLS version and handshake kind, the
medians of connections.csv's split, from real captures of our virtual device: TLS 1.2 full on mbedTLS 2.28 and 3.6
(tests/fixtures/analysis/tls12_device_stacks, two connections each), TLS 1.3 full and PSK-resumed on 3.6
(tests/fixtures/analysis/tls13_mbedtls36, reconnect and resume-ticket runs). The table's figures are the medians of
the connections written, the figure is drawn, and a cell analysed before the split existed adds nothing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis.connections import connections_table
from orchestrator.backends.tshark import export_chunks
from orchestrator.model.cell import CellRecord
from orchestrator.report import handshake_split
from orchestrator.report.document import Table
from orchestrator.results.bundle import Cell

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "analysis"
T12, T13 = FIX / "tls12_device_stacks", FIX / "tls13_mbedtls36"
# (cell, capture, port, key logs, device stack, scenario)
CELLS = (
    ("t12-228", T12 / "tls12_mbedtls228.pcapng", 39231, sorted((T12 / "mbedtls228").glob("*/keys.log")),
     "mbedtls-2.28", "tls"),
    ("t12-36", T12 / "tls12_mbedtls36.pcapng", 39231, sorted((T12 / "mbedtls36").glob("*/keys.log")),
     "mbedtls-3.6", "tls"),
    ("t13-r", T13 / "tls13_reconnect.pcapng", 56893, [T13 / "reconnect" / "keys.log"], "mbedtls-3.6",
     "tls13-chacha20"),
    ("t13-t", T13 / "tls13_resume_ticket.pcapng", 56893, [T13 / "resume" / "keys.log"], "mbedtls-3.6",
     "tls13-chacha20"),
)


def _cell(tmp: Path, name: str, pcap: Path, port: int, keylogs: list[Path], stack: str, scenario: str) -> Cell:
    folder = tmp / name
    folder.mkdir()
    table = connections_table(pcap, port, True, keylogs, export_chunks)
    table.to_csv(folder / "connections.csv", index=False)
    version = str(table["tls_version"].iloc[0])
    record = CellRecord.model_validate({"cell_id": name, "scenario": scenario, "payload": 65, "status": "ok",
                                        "spec": {"device_stack": stack, "publisher": "virtual"}})
    return Cell(record, folder, metrics={"tls": {"version": version}})


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> list[Cell]:
    tmp = tmp_path_factory.mktemp("split")
    return [_cell(tmp, *c) for c in CELLS]


def test_one_row_per_stack_version_and_kind_with_the_connections_medians(cells: list[Cell]) -> None:
    blocks = handshake_split.split_section(cells)
    table = next(b for b in blocks if isinstance(b, Table))
    keys = [r[:4] for r in table.rows]
    assert keys == [("mbedtls-2.28", "TLS 1.2", "full", "2"), ("mbedtls-3.6", "TLS 1.2", "full", "2"),
                    ("mbedtls-3.6", "TLS 1.3", "full", "4"), ("mbedtls-3.6", "TLS 1.3", "resumed-psk", "2")]
    written = pd.concat([pd.read_csv(c.folder / "connections.csv").assign(cell=c.record.cell_id) for c in cells])
    psk = written[written["handshake"] == "resumed-psk"]
    row = dict(zip(table.columns, table.rows[3], strict=True))
    assert float(row["device ms (median)"]) == pytest.approx(psk["split_device_ms"].median(), abs=5e-4)
    assert float(row["held by TCP ms (median)"]) == pytest.approx(psk["split_held_ms"].median(), abs=5e-4)
    assert float(row["first SYN -> CONNACK ms (median)"]) == pytest.approx(psk["split_span_ms"].median(), abs=5e-4)


def test_the_stacked_bars_are_drawn_and_labelled_measured(cells: list[Cell]) -> None:
    (figure,) = handshake_split.split_figures(cells)
    assert figure.filename == "plots/handshake_split.png" and figure.png.startswith(b"\x89PNG")
    assert "measured on the wire" in figure.caption


def test_a_cell_without_the_split_columns_adds_nothing(tmp_path: Path, cells: list[Cell]) -> None:
    old = tmp_path / "old"
    old.mkdir()
    pd.read_csv(cells[0].folder / "connections.csv").filter(regex="^(?!split_)").to_csv(old / "connections.csv")
    record = CellRecord.model_validate({"cell_id": "old", "scenario": "tls", "payload": 65, "status": "ok"})
    assert handshake_split.split_section([Cell(record, old, metrics={"tls": {"version": "TLS 1.2"}})]) == []
    assert handshake_split.split_figures([]) == []
