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


def _with_device(tmp: Path, cell: Cell, busy: list[float], clock: str) -> Cell:
    """The cell's wire rows with a device's phase columns beside them, as lifecycle.with_claims writes them."""
    from orchestrator.analysis import device_phases, lifecycle, projection
    rows = pd.read_csv(cell.folder / "connections.csv")
    n = len(rows)
    claims = pd.DataFrame({"conn": range(n), "resumed": [0] * n, "tcp_connect_ms": rows["tcp_connect_ms"],
                           "hello_sent_ms": [0.1] * n, "flight_in_ms": [2.0] * n, "verified_ms": [1.0] * n,
                           "kex_done_ms": [3.0] * n, "finished_sent_ms": [3.5] * n, "device_busy_ms": busy[:n]})
    joined, _ = lifecycle.with_claims(rows, claims)
    folder = tmp / f"{cell.record.cell_id}-dev"
    folder.mkdir()
    joined.to_csv(folder / "connections.csv", index=False)
    kinds = joined.assign(wire_bytes=joined["wire_client_to_server"] + joined["wire_server_to_client"])
    connections = {"device_phases": device_phases.phases_block(joined, claims, clock, tls=True),
                   "esp32_projection": projection.projection_block(kinds.to_dict("records"),
                                                                   projection.load_ops_table())}
    return Cell(cell.record, folder, metrics={**(cell.metrics or {}), "connections": connections})


def test_the_devices_own_phases_and_the_projection_are_beside_the_split_each_labelled(
        tmp_path: Path, cells: list[Cell]) -> None:
    t12 = _with_device(tmp_path, cells[0], [9.0, 11.0], "host CPU Test CPU (virtual device)")
    blocks = handshake_split.split_section([t12])
    phases, projected, sources = (b for b in blocks if isinstance(b, Table) and b is not blocks[2])
    row = dict(zip(phases.columns, phases.rows[0], strict=True))
    assert (row["clock"], row["compared"], row["device busy ms (median)"]) == (
        "host CPU Test CPU (virtual device)", "2", "10.000")
    wire = pd.read_csv(cells[0].folder / "connections.csv")["split_device_ms"]
    assert float(row["wire's device ms (median)"]) == pytest.approx(wire.median(), abs=5e-4)
    assert "projected (ESP32 240 MHz, table: orchestrator/grading/esp32_tls_ops.yaml)" in projected.caption
    by_stack = {r[3]: r for r in projected.rows}
    assert by_stack["mbedtls-3.6"][4] == "at least 428.0" and by_stack["mbedtls-2.28"][4].endswith("(no figure in "
                                                                                                   "the table)")
    assert any(r[1] == "ecdsa_p256_verify" and "TF-PSA-Crypto PR #873" in r[4] for r in sources.rows)
