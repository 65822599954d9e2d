"""Throwaway PKI for one results directory (or one `testbed up`): a CA, a server certificate and,
when a scenario asks for mutual TLS, client certificates; the clients' passwords, renewed whenever the PKI is.
Private keys and passwords are written 0600.
Nothing here is ever committed: the files live under the run's own folder.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.errors import TestbedError
from orchestrator.model.scenario import KeyType

BROKER_SERVICE = "broker"
CLIENTS = ("publisher", "subscriber")


@dataclass(frozen=True)
class Pki:
    folder: Path
    key_type: KeyType

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    def client_cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    @property
    def passwords(self) -> Path:
        """Plain ``user:password`` lines for the broker entrypoint to hash; 0600."""
        return self.folder / "passwords.txt"

    def password_for(self, user: str) -> str:
        for line in self.passwords.read_text().splitlines():
            name, _, pw = line.partition(":")
            if name == user:
                return pw
        raise TestbedError(f"no password for {user} in {self.passwords}")


def _new_key(key_type: KeyType) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def host_addresses() -> list[str]:
    """The host's own non-loopback IPv4 addresses (so a real ESP32 on the LAN can verify the broker)."""
    found: set[str] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    except OSError:
        pass
    try:  # the address the default route would use; sends nothing
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            found.add(s.getsockname()[0])
    except OSError:
        pass
    return sorted(a for a in found if not ipaddress.ip_address(a).is_loopback)


def server_sans(extra: list[str] | None = None) -> list[str]:
    names = [BROKER_SERVICE, "localhost", "127.0.0.1", *host_addresses(), *(extra or [])]
    return list(dict.fromkeys(names))


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def _cert(subject: str, public_key, issuer: x509.Name, signer, *, ca: bool, sans: list[str] | None,
          usage: list | None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer)
               .public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                      content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False,
                                                      encipher_only=False, decipher_only=False), critical=True)
    if sans:
        builder = builder.add_extension(_san(sans), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(signer, hashes.SHA256())


# A reused PKI must outlive the next sweep: re-made when less than this is left of its 30 days.
RENEW_BEFORE = dt.timedelta(days=2)


def remake_reason(pki: Pki, meta: dict[str, object], key_type: KeyType, sans: list[str]) -> str | None:
    """Why the folder's CA and server certificate cannot be reused (None: they can): missing, another key type,
    expired or near expiry, or SANs that no longer cover this host (its address changed)."""
    if not (pki.ca_cert.exists() and pki.ca_key.exists() and pki.server_cert.exists() and pki.server_key.exists()):
        return "none yet" if not pki.ca_cert.exists() else "incomplete"
    if meta.get("key_type") != key_type:
        return f"key type {meta.get('key_type')} -> {key_type}"
    try:
        certs = [x509.load_pem_x509_certificate(p.read_bytes()) for p in (pki.ca_cert, pki.server_cert)]
    except ValueError:
        return "unreadable certificate"
    left = min(c.not_valid_after_utc for c in certs) - dt.datetime.now(dt.UTC)
    if left < RENEW_BEFORE:
        return "expired" if left.total_seconds() <= 0 else f"expires in {left.total_seconds() / 3600:.0f} h"
    try:
        covered = {str(n) for n in certs[1].extensions.get_extension_for_class(x509.SubjectAlternativeName)
                   .value.get_values_for_type(x509.IPAddress)}
        covered |= set(certs[1].extensions.get_extension_for_class(x509.SubjectAlternativeName)
                       .value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        covered = set()
    uncovered = [n for n in sans if n not in covered]
    return f"SANs do not cover {', '.join(uncovered)}" if uncovered else None


def ensure_pki(folder: Path, key_type: KeyType, *, clients: bool = False, users: tuple[str, ...] = CLIENTS,
               extra_sans: list[str] | None = None) -> Pki:
    """Create (or reuse: same key type, not near expiry, SANs still covering this host) the CA, server and
    optional client certificates; client certificates are re-issued with a new CA, and the passwords (passwords.txt)
    are made anew with it."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder, key_type)
    meta_path = folder / "pki.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    remake = remake_reason(pki, meta, key_type, server_sans(extra_sans))
    if remake is not None:
        ca_key = _new_key(key_type)
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "testbed throwaway CA")])
        ca_cert = _cert("testbed throwaway CA", ca_key.public_key(), ca_name, ca_key, ca=True, sans=None,
                        usage=None)
        _write_private(pki.ca_key, _key_pem(ca_key))
        _write_public(pki.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
        sans = server_sans(extra_sans)
        server_key = _new_key(key_type)
        server_cert = _cert(BROKER_SERVICE, server_key.public_key(), ca_name, ca_key, ca=False, sans=sans,
                            usage=[ExtendedKeyUsageOID.SERVER_AUTH])
        _write_private(pki.server_key, _key_pem(server_key))
        _write_public(pki.server_cert, server_cert.public_bytes(serialization.Encoding.PEM))
        meta = {"key_type": key_type, "server_sans": sans, "clients": [], "made_because": remake}
    if clients and (remake is not None or not all(pki.client_cert(u).exists() for u in users)):
        loaded = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise TestbedError(f"{pki.ca_key}: unexpected key type {type(loaded).__name__}")
        ca_key = loaded
        ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
        for user in users:
            key = _new_key(key_type)
            cert = _cert(user, key.public_key(), ca_cert.subject, ca_key, ca=False, sans=None,
                         usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
            _write_private(pki.client_key(user), _key_pem(key))
            _write_public(pki.client_cert(user), cert.public_bytes(serialization.Encoding.PEM))
        meta["clients"] = list(users)
    if remake is not None or not pki.passwords.exists():  # renewed with the PKI: no password outlives its CA
        _write_private(pki.passwords, "".join(f"{u}:{secrets.token_urlsafe(18)}\n" for u in users).encode())
    _write_public(meta_path, json.dumps(meta, indent=2).encode())
    return pki
