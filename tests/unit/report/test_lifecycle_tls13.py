"""The lifecycle cost model's TLS 1.3 rows (report/lifecycle.py) from real captures of the virtual device on mbedTLS
3.6 (tests/fixtures/analysis/tls13_mbedtls36): a persistent connection, reconnect and resume-ticket runs of 3
connections of 2 readings; F and m solved among the 3.6 stack's own cells, F resumed from the PSK-resumed ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.analysis import lifecycle
from orchestrator.analysis.connections import connections_table
from orchestrator.analysis.pipeline import RunInputs, analyse_run, write_run_outputs
from orchestrator.backends.tshark import export_chunks
from orchestrator.model.cell import CellRecord
from orchestrator.report.lifecycle import _without_stack, cost_rows, costs
from orchestrator.report.order import groups
from orchestrator.results.bundle import Cell

TLS13 = Path(__file__).resolve().parents[2] / "fixtures" / "analysis" / "tls13_mbedtls36"
PORT = 56893
KEYLOGS = sorted(TLS13.glob("*/keys.log"))


def _cell(tmp: Path, name: str, pcap: str, mode: str) -> Cell:
    folder = {"persistent": TLS13 / "p65"}.get(mode, TLS13 / mode.replace("resume-ticket", "resume"))
    inputs = RunInputs(pcap=TLS13 / pcap, broker_port=PORT, tls=True, samples_expected=6, payload_bytes=65,
                       keylogs=KEYLOGS, publisher_log=folder / "publisher.csv", expected_tls=("TLS 1.3", 0x1303))
    analysis = analyse_run(inputs, export_chunks)
    if mode != "persistent":  # what runanalysis/analyse.py connections_of does
        rows = lifecycle.publisher_rows(connections_table(TLS13 / pcap, PORT, True, KEYLOGS, export_chunks),
                                        {"127.0.0.1"}, set())
        rows, mismatches = lifecycle.with_claims(rows, lifecycle.read_claims(folder / "connections.csv"))
        analysis.metrics["connections"] = lifecycle.lifecycle(rows, mismatches, mode=mode, per_connection=2,
                                                              close="disconnect", expected=3, readings=6, tls=True)
    run = tmp / name
    write_run_outputs(analysis, run)
    record = CellRecord.model_validate({
        "cell_id": name, "scenario": "tls13-chacha20", "payload": 65, "status": "ok",
        "connection": None if mode == "persistent" else {"asked": mode, "used": mode},
        "spec": {"device_stack": "mbedtls-3.6", "publisher": "virtual"}})
    return Cell(record, run, metrics=analysis.metrics)


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> list[Cell]:
    tmp = tmp_path_factory.mktemp("lifecycle13")
    return [_cell(tmp, "p", "tls13_65_100.pcapng", "persistent"),
            _cell(tmp, "r", "tls13_reconnect.pcapng", "reconnect"),
            _cell(tmp, "t", "tls13_resume_ticket.pcapng", "resume-ticket")]


def test_the_wire_shows_full_then_psk(cells: list[Cell]) -> None:
    reconnect, ticket = (c.metrics["connections"] for c in cells[1:])
    assert reconnect["handshakes"]["full"] == 3 and reconnect["resumed_after_first"] == 0
    assert (ticket["handshakes"]["full"], ticket["handshakes"]["resumed-psk"]) == (1, 2)
    assert ticket["client_claims"]["mismatches"] == []


def test_tls13_rows_of_the_cost_model(cells: list[Cell]) -> None:
    assert [c.condition for c in cells] == ["none + mbedtls-3.6", "none + reconnect + mbedtls-3.6",
                                            "none + resume-ticket + mbedtls-3.6"]
    model = costs(groups(cells))
    assert [(c.impairment, c.scenario, c.mode) for c in model] == [
        ("none, mbedtls-3.6", "tls13-chacha20", "full handshake"),
        ("none, mbedtls-3.6", "tls13-chacha20", "resumed (ticket, TLS 1.3 PSK)")]
    full, resumed = model
    # m: a reading's bytes on the wire both ways, at least the 84 B PUBLISH's 183 B frame; F: the connection's rest
    assert 183 <= full.per_reading < 400
    assert full.fixed > 2936  # more than the handshake bytes up to CONNACK (the ending's frames too)
    assert 0 < resumed.fixed < full.fixed - 500  # no Certificate and CertificateVerify in a resumed handshake
    rows = cost_rows(model)
    assert rows[0][4] == f"{full.fixed:.0f}" and rows[1][9] == "n/a"  # no plain 3.6 cell: no break-even made up
    print(f"TLS 1.3 on 3.6 at 65 B: F full {full.fixed:.0f} B, F resumed {resumed.fixed:.0f} B, "
          f"m {full.per_reading:.1f} B")


def test_the_stack_token_is_taken_out_of_the_condition() -> None:
    assert _without_stack("reconnect + mbedtls-3.6") == ("reconnect", "mbedtls-3.6")
    assert _without_stack("mbedtls-3.6") == ("persistent", "mbedtls-3.6")
    assert _without_stack("reconnect + 20 devices") == ("reconnect + 20 devices", "")
    assert _without_stack("persistent") == ("persistent", "")
