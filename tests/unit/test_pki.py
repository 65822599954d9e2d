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
