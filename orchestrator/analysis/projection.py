"""An ESP32 projection of each handshake kind where there is no board (issue 41, part 3): the client's operations of
the kind times a per-operation table for the ESP32 at 240 MHz on mbedTLS 2.28 and 3.6
(orchestrator/grading/esp32_tls_ops.yaml, each value with its source; the user's own table through
TESTBED_ESP32_OPS_TABLE). Labelled "projected (ESP32 240 MHz, table: <file>)" and kept apart from every measured
figure (metrics.json ``connections.esp32_projection``, the report's set-up section).

The client's operations per kind (ECDHE over P-256 assumed: the table's X25519 figures are unknown):
- TLS 1.2 full, ECDHE-ECDSA: an ECDHE key pair and its shared secret, two ECDSA P-256 verifies (the server's
  certificate by the CA, the ServerKeyExchange's signature); ECDHE-RSA the same with two RSA-2048 verifies;
- TLS 1.2 resumed by ID or ticket: no asymmetric operation (the abbreviated handshake);
- TLS 1.3 full: an ECDHE key pair and its secret, two ECDSA P-256 verifies (the certificate by the CA, the
  CertificateVerify; the lab's PKI signs with ECDSA P-256);
- TLS 1.3 resumed by PSK (psk_dhe_ke, as mbedTLS and OpenSSL do): the ECDHE key pair and secret, no verify;
- with a client certificate (a full handshake): one ECDSA P-256 sign (its CertificateVerify);
- every kind: SHA-256 over its handshake bytes, and TLS 1.3's encrypted flights through ChaCha20-Poly1305, each per
  KiB of the kind's median bytes on the wire.
An operation the table has no figure for leaves the total a lower bound, and is named (``unknown``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import TestbedError
from orchestrator.model import ciphers
from orchestrator.model.yamlfile import read_yaml

TABLE_ENV = "TESTBED_ESP32_OPS_TABLE"
DEFAULT_TABLE = "esp32_tls_ops.yaml"
STACKS = ("mbedtls-2.28", "mbedtls-3.6")
OPERATIONS = ("ecdhe_p256_keygen", "ecdhe_p256_secret", "ecdhe_x25519_keygen", "ecdhe_x25519_secret",
              "ecdsa_p256_verify", "ecdsa_p256_sign", "rsa2048_verify", "chacha20_poly1305_per_kib", "sha256_per_kib")


@dataclass(frozen=True)
class OpsTable:
    name: str  # the file, as the label names it
    cpu: str
    stacks: dict[str, dict[str, dict[str, Any]]]  # stack -> operation -> {ms, confidence, source}


def load_ops_table(path: Path | None = None) -> OpsTable:
    """The table at ``path``, or the one shipped (orchestrator/grading/esp32_tls_ops.yaml); checked."""
    if path is None:
        name = f"orchestrator/grading/{DEFAULT_TABLE}"
        shipped = resources.files("orchestrator.grading").joinpath(DEFAULT_TABLE)
        data = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    else:
        if not path.is_file():
            raise TestbedError(f"cannot read the ESP32 operations table {path}: no such file",
                               hint=f"{TABLE_ENV} names a YAML laid out as orchestrator/grading/{DEFAULT_TABLE}")
        name, data = str(path), read_yaml(path)[0]  # the user's file: as every YAML a user gives is read
    data = data or {}
    stacks = data.get("stacks") if isinstance(data, dict) else None
    if not isinstance(stacks, dict) or not stacks:
        raise TestbedError(f"the ESP32 operations table {name} has no stacks",
                           hint=f"lay it out as orchestrator/grading/{DEFAULT_TABLE}")
    for stack, ops in stacks.items():
        for op, entry in (ops or {}).items():
            ms = entry.get("ms") if isinstance(entry, dict) else "missing"
            if op not in OPERATIONS or not (ms is None or isinstance(ms, int | float)) or not entry.get("source"):
                raise TestbedError(f"the ESP32 operations table {name}: {stack} {op} needs a known operation, "
                                   "ms (a number or null) and its source",
                                   hint=f"operations: {', '.join(OPERATIONS)}")
    return OpsTable(name, str(data.get("cpu") or "ESP32 240 MHz"), stacks)


def operations(version: str | None, suite_id: str | None, kind: str, kib: float,
               client_cert: bool = False) -> dict[str, float]:
    """The client's operations of one handshake kind (the module docstring), with their counts."""
    if kind not in ("full", "resumed-id", "resumed-ticket", "resumed-psk"):
        return {}
    tls13 = str(version) == "TLSv1.3"
    ops: dict[str, float] = {"sha256_per_kib": kib}
    if tls13:
        ops["chacha20_poly1305_per_kib"] = kib
    if kind == "full" or kind == "resumed-psk":
        ops |= {"ecdhe_p256_keygen": 1, "ecdhe_p256_secret": 1}
    if kind == "full":
        suite = ciphers.by_code(int(suite_id, 16)) if suite_id else None
        verify = "rsa2048_verify" if suite is not None and suite.auth == "RSA" else "ecdsa_p256_verify"
        ops[verify] = 2
        if client_cert:
            ops["ecdsa_p256_sign"] = 1
    return ops


def project_kind(table: OpsTable, stack: str, ops: dict[str, float]) -> dict[str, Any]:
    """One kind on one stack: the projected ms (the known operations' sum; a lower bound when ``unknown`` is not
    empty; None when the table knows none of them), and each operation with its count, figure and source."""
    known = table.stacks.get(stack) or {}
    rows, total, unknown = [], 0.0, []
    for op, count in ops.items():
        entry = known.get(op) or {}
        ms = entry.get("ms")
        rows.append({"operation": op, "count": round(count, 3), "ms_each": ms,
                     "confidence": entry.get("confidence"), "source": entry.get("source") or "not in the table"})
        if ms is None:
            unknown.append(op)
        else:
            total += float(ms) * count
    none_known = len(unknown) == len(rows)
    return {"projected_ms": None if none_known else round(total, 1), "lower_bound": bool(unknown) and not none_known,
            "unknown": unknown, "operations": rows}


def label(table: OpsTable) -> str:
    return f"projected ({table.cpu}, table: {table.name})"


def projection_block(rows: list[dict[str, Any]], table: OpsTable, client_cert: bool = False) -> dict[str, Any]:
    """metrics.json ``connections.esp32_projection``: per (TLS version, suite, kind) of ``rows`` (each with its
    connections' median bytes on the wire), the projection on every stack that speaks that version."""
    kinds = []
    for r in rows:
        ops = operations(r.get("tls_version"), r.get("cipher_suite_id"), str(r["handshake"]),
                         float(r.get("wire_bytes") or 0) / 1024, client_cert)
        if not ops:
            continue
        stacks = [s for s in STACKS if s in table.stacks and not (r.get("tls_version") == "TLSv1.3"
                                                                   and s == "mbedtls-2.28")]
        kinds.append({"tls_version": r.get("tls_version"), "cipher_suite_id": r.get("cipher_suite_id"),
                      "handshake": r["handshake"], "client_certificate": client_cert,
                      "stacks": {s: project_kind(table, s, ops) for s in stacks}})
    return {"label": label(table), "table": table.name, "assumes": "ECDHE over P-256; the lab's ECDSA P-256 PKI",
            "kinds": kinds}
