"""The TLS cipher suites the testbed knows, with their names in every dialect we meet.

OpenSSL silently ignores an unknown name inside a cipher list, so every name a user gives is
checked against this table before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TlsVersion = Literal["1.2", "1.3"]


@dataclass(frozen=True)
class CipherSuite:
    iana: str              # RFC / IANA name, also what vdevice (mbedTLS) is given
    openssl: str           # OpenSSL name (TLS 1.2 names differ; TLS 1.3 names are the IANA ones)
    code: int              # the two-byte id in ClientHello / ServerHello
    version: TlsVersion
    auth: Literal["ECDSA", "RSA", "any"]  # certificate type the suite needs (TLS 1.3: any)
    record_overhead: int   # bytes a TLS record adds to its plaintext: header + explicit nonce + tag (+1 in 1.3)
    rfc: str

    @property
    def code_hex(self) -> str:
        return f"0x{self.code:04x}"


SUITES: tuple[CipherSuite, ...] = (
    CipherSuite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305", 0xCCA9,
                "1.2", "ECDSA", 21, "RFC 7905"),
    CipherSuite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305", 0xCCA8,
                "1.2", "RSA", 21, "RFC 7905"),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256", 0xC02B,
                "1.2", "ECDSA", 29, "RFC 5289/5288"),
    CipherSuite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256", 0xC02F,
                "1.2", "RSA", 29, "RFC 5289/5288"),
    CipherSuite("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384", 0xC02C,
                "1.2", "ECDSA", 29, "RFC 5289/5288"),
    CipherSuite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384", 0xC030,
                "1.2", "RSA", 29, "RFC 5289/5288"),
    CipherSuite("TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256", 0x1301, "1.3", "any", 22, "RFC 8446"),
    CipherSuite("TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384", 0x1302, "1.3", "any", 22, "RFC 8446"),
    CipherSuite("TLS_CHACHA20_POLY1305_SHA256", "TLS_CHACHA20_POLY1305_SHA256", 0x1303, "1.3", "any", 22,
                "RFC 8446"),
)


def valid_names(version: TlsVersion) -> list[str]:
    """Names accepted in a scenario's cipher list for ``version`` (OpenSSL style for 1.2)."""
    return [s.openssl for s in SUITES if s.version == version]


def lookup(name: str, version: TlsVersion | None = None) -> CipherSuite | None:
    """Find a suite by its OpenSSL or IANA name (case-insensitive)."""
    key = name.strip().upper()
    for s in SUITES:
        if version is not None and s.version != version:
            continue
        if key in (s.openssl.upper(), s.iana.upper()):
            return s
    return None


def by_code(code: int) -> CipherSuite | None:
    for s in SUITES:
        if s.code == code:
            return s
    return None
