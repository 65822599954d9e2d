"""The report's "handshake round trips" (report/stacks.py row, report/lifecycle.py column): the median of a cell's
connections.csv ``handshake_round_trips``, here written by analysis/connections.py from the device's own captures
(TLS 1.2 on mbedTLS 2.28 and 3.6, TLS 1.3 full and PSK-resumed on 3.6); n/a for a cell without connections.csv."""

from __future__ import annotations

from pathlib import Path

from orchestrator.analysis.connections import connections_table
from orchestrator.backends.tshark import export_chunks
from orchestrator.model.cell import CellRecord
from orchestrator.model.layout import Layout
from orchestrator.report.lifecycle import round_trips_median
from orchestrator.report.stacks import table_rows
from orchestrator.results.bundle import Cell

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "analysis"
TLS12, TLS13 = FIXTURES / "tls12_device_stacks", FIXTURES / "tls13_mbedtls36"
PORT12, PORT13 = 39231, 56893  # the loopback Mosquittos' ports when the fixtures were recorded


def _cell(folder: Path, stack: str, version: str, pcap: Path | None, port: int, keylogs: tuple[Path, ...]) -> Cell:
    folder.mkdir()
    if pcap is not None:
        connections_table(pcap, port, True, keylogs, export_chunks).to_csv(Layout(folder).connections, index=False)
    record = CellRecord.model_validate({"cell_id": folder.name, "scenario": "tls", "payload": 65, "status": "ok",
                                        "spec": {"device_stack": stack, "publisher": "virtual"}})
    return Cell(record, folder, metrics={"tls": {"version": version}})


def test_the_stacks_table_shows_each_stacks_median_round_trips(tmp_path: Path) -> None:
    cells = {("mbedtls-2.28", "TLS 1.2"): [_cell(tmp_path / "a", "mbedtls-2.28", "TLS 1.2",
                                                 TLS12 / "tls12_mbedtls228.pcapng", PORT12, ())],
             ("mbedtls-3.6", "TLS 1.2"): [_cell(tmp_path / "b", "mbedtls-3.6", "TLS 1.2",
                                                TLS12 / "tls12_mbedtls36.pcapng", PORT12, ())],
             ("mbedtls-3.6", "TLS 1.3"): [_cell(tmp_path / "c", "mbedtls-3.6", "TLS 1.3",
                                                TLS13 / "tls13_resume_ticket.pcapng", PORT13,
                                                (TLS13 / "resume" / "keys.log",))]}
    rows = dict((r[0], r[1:]) for r in table_rows(cells))
    assert rows["handshake round trips"] == ("2.0", "2.0", "1.0")  # 1.2 full; 1.3 one full and two PSK


def test_a_cell_without_connections_csv_says_na(tmp_path: Path) -> None:
    cell = _cell(tmp_path / "p", "mbedtls-3.6", "TLS 1.3", None, PORT13, ())
    assert round_trips_median(cell) is None
    rows = dict((r[0], r[1:]) for r in table_rows({("mbedtls-3.6", "TLS 1.3"): [cell]}))
    assert rows["handshake round trips"] == ("n/a", "n/a", "n/a")
