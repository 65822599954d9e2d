"""The ESP32 projection of each handshake kind (orchestrator/analysis/projection.py, issue 41 part 3): the
operations per kind times the shipped table (orchestrator/grading/esp32_tls_ops.yaml) or the user's own
(TESTBED_ESP32_OPS_TABLE), labelled projected, each value with its source, an unknown one named and never filled."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis import projection
from orchestrator.errors import TestbedError
from orchestrator.model.scenario import load_scenario
from orchestrator.runanalysis.analyse import esp32_projection

KINDS = [{"tls_version": "TLSv1.2", "cipher_suite_id": "0xcca9", "handshake": "full", "wire_bytes": 2048},
         {"tls_version": "TLSv1.2", "cipher_suite_id": "0xcca9", "handshake": "resumed-ticket", "wire_bytes": 1024},
         {"tls_version": "TLSv1.3", "cipher_suite_id": "0x1303", "handshake": "full", "wire_bytes": 3072},
         {"tls_version": "TLSv1.3", "cipher_suite_id": "0x1303", "handshake": "resumed-psk", "wire_bytes": 1536}]


def _by(block: dict, version: str, kind: str, stack: str) -> dict:
    k = next(k for k in block["kinds"] if (k["tls_version"], k["handshake"]) == (version, kind))
    return k["stacks"][stack]


def test_the_shipped_table_every_value_with_its_source() -> None:
    table = projection.load_ops_table()
    assert table.name == "orchestrator/grading/esp32_tls_ops.yaml" and set(table.stacks) == set(projection.STACKS)
    v36 = table.stacks["mbedtls-3.6"]
    assert v36["ecdsa_p256_verify"]["ms"] == 172.7 and "TF-PSA-Crypto PR #873" in v36["ecdsa_p256_verify"]["source"]
    assert all(e["source"] for ops in table.stacks.values() for e in ops.values())


def test_each_kind_gets_its_operations_and_the_known_sum_as_a_lower_bound() -> None:
    block = projection.projection_block(KINDS, projection.load_ops_table())
    assert block["label"] == "projected (ESP32 240 MHz, table: orchestrator/grading/esp32_tls_ops.yaml)"
    full = _by(block, "TLSv1.2", "full", "mbedtls-3.6")
    assert full["projected_ms"] == pytest.approx(2 * 172.7 + 2 * 41.3) and full["lower_bound"]
    assert full["unknown"] == ["sha256_per_kib"]  # no published rate: named, not guessed
    psk = _by(block, "TLSv1.3", "resumed-psk", "mbedtls-3.6")
    assert psk["projected_ms"] == pytest.approx(82.6) and "ecdsa_p256_verify" not in {
        o["operation"] for o in psk["operations"]}
    assert _by(block, "TLSv1.2", "resumed-ticket", "mbedtls-3.6")["projected_ms"] is None  # symmetric only
    assert _by(block, "TLSv1.2", "full", "mbedtls-2.28")["projected_ms"] is None  # no 2.28 figure published
    assert "mbedtls-2.28" not in next(k for k in block["kinds"] if k["tls_version"] == "TLSv1.3")["stacks"]
    rsa = projection.operations("TLSv1.2", "0xc02f", "full", 1.0, client_cert=True)
    assert rsa["rsa2048_verify"] == 2 and rsa["ecdsa_p256_sign"] == 1 and "ecdsa_p256_verify" not in rsa


def test_the_user_replaces_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "my-esp32.yaml"
    mine.write_text("cpu: ESP32 240 MHz\nstacks:\n  mbedtls-3.6:\n"
                    "    ecdhe_p256_keygen: {ms: 10, source: my bench}\n"
                    "    ecdhe_p256_secret: {ms: 20, source: my bench}\n"
                    "    ecdsa_p256_verify: {ms: 100, source: my bench}\n"
                    "    sha256_per_kib: {ms: 0.5, source: my bench}\n")
    monkeypatch.setenv(projection.TABLE_ENV, str(mine))
    rows = pd.DataFrame({"tls_version": ["TLSv1.2"] * 2, "cipher_suite_id": ["0xcca9"] * 2, "handshake": ["full"] * 2,
                         "wire_client_to_server": [1000, 1200], "wire_server_to_client": [1048, 1248]})
    block = esp32_projection(rows, load_scenario("tls"))
    assert block["label"] == f"projected (ESP32 240 MHz, table: {mine})"
    full = _by(block, "TLSv1.2", "full", "mbedtls-3.6")
    kib = (2048 + 2448) / 2 / 1024  # the kind's median bytes on the wire
    assert full["projected_ms"] == pytest.approx(10 + 20 + 2 * 100 + 0.5 * kib, abs=0.05) and not full["lower_bound"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("stacks:\n  mbedtls-3.6:\n    ecdsa_p256_verify: {ms: 1}\n")
    with pytest.raises(TestbedError, match="needs a known operation, ms .* and its source"):
        projection.load_ops_table(bad)
    with pytest.raises(TestbedError, match="cannot read the ESP32 operations table"):
        projection.load_ops_table(tmp_path / "missing.yaml")
