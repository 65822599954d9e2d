"""The report's device-stack section (report/stacks.py) from real captures of our virtual device: TLS 1.2 on mbedTLS
2.28, TLS 1.2 on 3.6 and TLS 1.3 on 3.6 at 65 and 100 B (tests/fixtures/analysis/tls12_device_stacks and
tls13_mbedtls36), analysed, written as a bundle and built into report.md as `testbed report` does; a TLS 1.3
resume-ticket run of the 3.6 device classified resumed-psk on the wire, as the device claims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.analysis import lifecycle, tlsrecords
from orchestrator.analysis.connections import connections_table
from orchestrator.analysis.pipeline import RunInputs, analyse_run, write_run_outputs
from orchestrator.backends.tshark import export_chunks
from orchestrator.model.cell import CellRecord
from orchestrator.report import build_report
from orchestrator.report.document import Table
from orchestrator.report.stacks import COLUMNS, base_condition, stacks_section, table_rows
from orchestrator.results.bundle import Cell

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "analysis"
TLS12, TLS13 = FIXTURES / "tls12_device_stacks", FIXTURES / "tls13_mbedtls36"
PORT12, PORT13 = 39231, 56893  # the loopback Mosquittos' ports when the fixtures were recorded
# cell -> (scenario, device_stack, capture, broker port, device folder, expected TLS)
RUNS = {
    "tls": ("tls", "mbedtls-2.28", TLS12 / "tls12_mbedtls228.pcapng", PORT12, TLS12 / "mbedtls228",
            ("TLS 1.2", 0xCCA9)),
    "tls-mbedtls36": ("tls", "mbedtls-3.6", TLS12 / "tls12_mbedtls36.pcapng", PORT12, TLS12 / "mbedtls36",
                      ("TLS 1.2", 0xCCA9)),
    "tls13-chacha20-mbedtls36": ("tls13-chacha20", "mbedtls-3.6", TLS13 / "tls13_65_100.pcapng", PORT13, TLS13,
                                 ("TLS 1.3", 0x1303)),
}


def _run(root: Path, name: str, payload: int) -> None:
    scenario, stack, pcap, port, folder, expected = RUNS[name]
    run = root / "runs" / f"{name.replace(scenario, f'{scenario}-{payload}B-none-r1', 1)}"
    keylogs = sorted(folder.glob("p*/keys.log"))
    inputs = RunInputs(pcap=pcap, broker_port=port, tls=True, samples_expected=6, payload_bytes=payload,
                       keylogs=keylogs, publisher_log=folder / f"p{payload}" / "publisher.csv", expected_tls=expected)
    analysis = analyse_run(inputs, export_chunks)
    summary = json.loads((folder / f"p{payload}" / "summary.json").read_text())
    # what runanalysis/analyse.py does with the device's own summary
    tlsrecords.with_granularity(analysis.metrics, summary["tls13_padding_granularity"], "the device's summary")
    write_run_outputs(analysis, run)
    (run / "cell.json").write_text(json.dumps({
        "cell_id": run.name, "scenario": scenario, "payload": payload, "impairment": "none", "repeat": 1,
        "status": "ok", "spec": {"device_stack": stack, "publisher": "virtual", "samples": 6},
        "device": {"tls_library": summary["tls_library"],
                   "tls13_padding_granularity": summary["tls13_padding_granularity"]}}), encoding="utf-8")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("stacks") / "bundle"
    for name in RUNS:
        for payload in (65, 100):
            _run(root, name, payload)
    (root / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "created_utc": "2026-12-02T00:00:00Z", "command": "stacks test", "tool_version": "t",
        "git_commit": None, "seed": 7, "plan": {"baseline": "tls"}, "environment": {}}), encoding="utf-8")
    build_report(root, baseline="tls", resamples=200)
    return (root / "report.md").read_text(encoding="utf-8")


def _table(report: str, payload: int) -> dict[str, list[str]]:
    """The section's table of one payload: row label -> the three stack columns."""
    section = report.split("### " + f"{payload} B payload", 1)[1].split("\n#", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|") and not line.startswith("|--") and not line.startswith("| ---")]
    assert rows[0] == list(COLUMNS)
    return {r[0]: r[1:] for r in rows[1:]}


@pytest.mark.parametrize(("payload", "wire", "tls", "padding"),
                         [(65, ("84", "84", "84"), ("21", "21", "33"), "11.0"),
                          (100, ("119", "119", "119"), ("21", "21", "30"), "8.0")])
def test_one_table_per_payload_three_stacks(report: str, payload: int, wire: tuple[str, ...], tls: tuple[str, ...],
                                            padding: str) -> None:
    table = _table(report, payload)
    assert "mbed TLS 2.28." in table["cells"][0] and "Mbed TLS 3.6." in table["cells"][1]  # the devices' own words
    assert "Mbed TLS 3.6." in table["cells"][2]
    assert "TLS_CHACHA20_POLY1305_SHA256" in table["cells"][2]
    assert tuple(table["MQTT bytes per PUBLISH"]) == wire
    assert tuple(table["TLS bytes per PUBLISH"]) == tls
    assert table["TLS 1.3 record: padding"] == ["n/a", "n/a", padding]  # TLS 1.2 records are not split
    assert table["TLS 1.3 record: tag"] == ["n/a", "n/a", "16"]
    assert table["padding granularity (the device's)"] == ["n/a", "n/a", "16"]
    for label in ("handshake bytes client->broker", "handshake bytes broker->client", "TLS handshake ms "
                  "(ClientHello -> Finished)"):
        assert all(v != "n/a" for v in table[label]), label
    # the cells hold no broker CPU (no stats sampler ran for a loopback capture): shown missing, never made up
    assert table["broker CPU ms per message"] == ["n/a"] * 3
    assert table["resumption on the wire"] == ["not asked (one persistent connection)"] * 3


def test_the_wire_plot_draws_the_padding_layer(report: str) -> None:
    assert "wire_bytes_by_layer.png" in report


def _cell(stack: str, version: str, payload: int, **metrics: object) -> Cell:
    record = CellRecord.model_validate({"cell_id": f"{stack}-{version}-{payload}", "scenario": "tls",
                                        "payload": payload, "status": "ok",
                                        "spec": {"device_stack": stack, "publisher": "virtual"}})
    return Cell(record, Path("c"), metrics={"tls": {"version": version}, **metrics})


def test_no_section_without_a_36_cell_and_the_stack_is_not_a_condition() -> None:
    assert stacks_section([_cell("mbedtls-2.28", "TLS 1.2", 65)]) == []
    assert base_condition(_cell("mbedtls-3.6", "TLS 1.3", 65)) == "none"
    blocks = stacks_section([_cell("mbedtls-2.28", "TLS 1.2", 65), _cell("mbedtls-3.6", "TLS 1.3", 65)])
    assert len([b for b in blocks if isinstance(b, Table)]) == 1


def test_the_broker_cpu_rows_read_the_cells_figures() -> None:
    cpu = {"process": {"per_reading": {"cpu_ms_per_event": 0.0421},
                       "per_handshake_kind": {"handshakes": {"full": {"cpu_ms_per_event": 1.25},
                                                             "resumed-psk": {"cpu_ms_per_event": 0.5}}}}}
    rows = dict((r[0], r[1:]) for r in table_rows({("mbedtls-3.6", "TLS 1.3"): [_cell("mbedtls-3.6", "TLS 1.3", 65,
                                                                                      broker_cpu=cpu)]}))
    assert rows["broker CPU ms per full handshake"] == ("n/a", "n/a", "1.250")
    assert rows["broker CPU ms per resumed handshake (PSK, TLS 1.3)"] == ("n/a", "n/a", "0.500")
    assert rows["broker CPU ms per message"] == ("n/a", "n/a", "0.0421")
    assert rows["cells"][:2] == ("no cell", "no cell")


def test_tls13_resume_ticket_of_the_36_device_is_resumed_psk_on_the_wire() -> None:
    """The per-connection table on the device's own capture: its first connection full, every later one resumed
    by PSK (pre_shared_key in the ServerHello), and the device's claims agree."""
    folder = TLS13 / "resume"
    table = connections_table(TLS13 / "tls13_resume_ticket.pcapng", PORT13, True, [folder / "keys.log"],
                              export_chunks)
    rows = lifecycle.publisher_rows(table, {"127.0.0.1"}, set())
    assert list(rows["handshake"]) == ["full", "resumed-psk", "resumed-psk"]
    assert set(rows["tls_version"]) == {"TLS 1.3"}
    claimed, mismatches = lifecycle.with_claims(rows, lifecycle.read_claims(folder / "connections.csv"), None)
    assert mismatches == [] and list(claimed["claimed_resumed"]) == [False, True, True]
