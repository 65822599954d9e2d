import ipaddress
import stat

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from orchestrator.lab.pki import ensure_pki


def _load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_server_cert_sans_keys_0600_and_chain(tmp_path):
    pki = ensure_pki(tmp_path, "ecdsa-p256")
    cert = _load(pki.server_cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"broker", "localhost"} <= set(san.get_values_for_type(x509.DNSName))
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    ca = _load(pki.ca_cert)
    cert.verify_directly_issued_by(ca)
    for key in (pki.server_key, pki.ca_key, pki.passwords):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert pki.password_for("publisher") != pki.password_for("subscriber")


def test_reused_when_key_type_matches_and_remade_when_not(tmp_path):
    first = ensure_pki(tmp_path, "ecdsa-p256").server_cert.read_bytes()
    assert ensure_pki(tmp_path, "ecdsa-p256").server_cert.read_bytes() == first
    rsa_pki = ensure_pki(tmp_path, "rsa2048")
    assert isinstance(_load(rsa_pki.server_cert).public_key(), rsa.RSAPublicKey)


def test_client_certs_for_mutual_tls(tmp_path):
    pki = ensure_pki(tmp_path, "ecdsa-p256", clients=True)
    ca = _load(pki.ca_cert)
    for user in ("publisher", "subscriber"):
        c = _load(pki.client_cert(user))
        c.verify_directly_issued_by(ca)
        assert stat.S_IMODE(pki.client_key(user).stat().st_mode) == 0o600


def _reissue_server_cert(pki, days_left: float) -> None:
    """Re-sign the server certificate with the folder's CA so that it has ``days_left`` of validity."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes, serialization

    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    old = _load(pki.server_cert)
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(old.subject).issuer_name(old.issuer)
               .public_key(old.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(days=40)).not_valid_after(now + dt.timedelta(days=days_left)))
    for ext in old.extensions:
        builder = builder.add_extension(ext.value, critical=ext.critical)
    pki.server_cert.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))


def test_remade_when_expired_or_near_expiry_and_clients_reissued(tmp_path):
    import json

    for days_left, why in ((-1, "expired"), (0.5, "expires in 12 h")):
        pki = ensure_pki(tmp_path, "ecdsa-p256", clients=True)
        _reissue_server_cert(pki, days_left)
        old_ca = pki.ca_cert.read_bytes()
        renewed = ensure_pki(tmp_path, "ecdsa-p256", clients=True)
        assert renewed.ca_cert.read_bytes() != old_ca
        assert json.loads((tmp_path / "pki.json").read_text())["made_because"] == why
        ca = _load(renewed.ca_cert)
        _load(renewed.server_cert).verify_directly_issued_by(ca)
        for user in ("publisher", "subscriber"):  # client certificates follow the new CA
            _load(renewed.client_cert(user)).verify_directly_issued_by(ca)
    kept = ensure_pki(tmp_path, "ecdsa-p256", clients=True).ca_cert.read_bytes()
    assert ensure_pki(tmp_path, "ecdsa-p256", clients=True).ca_cert.read_bytes() == kept  # 30 days left: reused


def test_remade_when_the_sans_no_longer_cover_the_host(tmp_path):
    first = ensure_pki(tmp_path, "ecdsa-p256").server_cert.read_bytes()
    moved = ensure_pki(tmp_path, "ecdsa-p256", extra_sans=["192.0.2.77"])  # e.g. the host's new LAN address
    assert moved.server_cert.read_bytes() != first
    san = _load(moved.server_cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("192.0.2.77") in san.get_values_for_type(x509.IPAddress)
    assert ensure_pki(tmp_path, "ecdsa-p256", extra_sans=["192.0.2.77"]).server_cert.read_bytes() == \
        moved.server_cert.read_bytes()


def test_passwords_are_renewed_with_the_pki_and_kept_with_it(tmp_path):
    pki = ensure_pki(tmp_path, "ecdsa-p256")
    first = pki.passwords.read_bytes()
    assert ensure_pki(tmp_path, "ecdsa-p256").passwords.read_bytes() == first  # reused: the same passwords
    for renew in (lambda: ensure_pki(tmp_path, "rsa2048"),  # another key type
                  lambda: (_reissue_server_cert(pki, -1), ensure_pki(tmp_path, "rsa2048"))[1]):  # expired
        before = pki.passwords.read_bytes()
        renewed = renew()
        assert renewed.passwords.read_bytes() != before, "the PKI was renewed, its passwords were not"
        assert stat.S_IMODE(renewed.passwords.stat().st_mode) == 0o600
        assert renewed.password_for("publisher") != renewed.password_for("subscriber")
