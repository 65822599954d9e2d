from pathlib import Path

import pytest

from orchestrator.errors import TestbedError
from orchestrator.model import ciphers
from orchestrator.model.scenario import builtin_names, load_scenario


def test_builtins_are_the_documented_ones():
    assert builtin_names() == ["plain", "tls", "tls-aes128gcm", "tls-noticket", "tls13-chacha20"]


def test_tls_scenario_is_chacha20_poly1305_only():
    s = load_scenario("tls")
    assert s.tls is not None
    assert s.tls.ciphers_tls12 == ["ECDHE-ECDSA-CHACHA20-POLY1305"]
    assert s.tls.ciphers_tls13 == ["TLS_CHACHA20_POLY1305_SHA256"]
    suite = s.expected_suite()
    assert suite is not None and suite.code == 0xCCA9 and suite.version == "1.2"
    assert s.client_cipher_iana() == ["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"]
    assert s.anonymous is False  # anonymous access off in TLS scenarios


def test_plain_allows_anonymous_like_the_study():
    s = load_scenario("plain")
    assert s.transport == "plain" and s.port == 1883 and s.anonymous is True
    assert s.expected_suite() is None


def test_comparison_scenarios_expect_their_suites():
    assert load_scenario("tls-aes128gcm").expected_suite().code == 0xC02B
    t13 = load_scenario("tls13-chacha20")
    assert t13.expected_suite().code == 0x1303 and t13.tls.client_version == "1.3"


def test_rfc_record_overheads_in_the_cipher_table():
    assert ciphers.lookup("ECDHE-ECDSA-CHACHA20-POLY1305").record_overhead == 21  # RFC 7905
    assert ciphers.lookup("ECDHE-RSA-AES128-GCM-SHA256").record_overhead == 29  # RFC 5288
    assert ciphers.lookup("TLS_CHACHA20_POLY1305_SHA256").record_overhead == 22  # RFC 8446
    assert ciphers.lookup("tls_ecdhe_ecdsa_with_chacha20_poly1305_sha256").code == 0xCCA9


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mine.yaml"
    p.write_text(text)
    return p


def test_invalid_cipher_rejected_with_the_valid_list(tmp_path):
    p = _write(tmp_path, "name: mine\ntransport: tls\nport: 8883\ntls:\n  max_version: '1.2'\n"
                         "  ciphers_tls12: [ECDHE-ECDSA-CHACHA20-POLY1305, CHACHA-TYPO]\n")
    with pytest.raises(TestbedError) as exc:
        load_scenario(str(p))
    text = exc.value.evidence
    assert "CHACHA-TYPO" in text and "ECDHE-ECDSA-AES128-GCM-SHA256" in text
    assert f"{p}:4: tls:" in text  # file, line and field


def test_unknown_key_named_with_file_and_line(tmp_path):
    p = _write(tmp_path, "name: mine\ntransport: plain\nport: 1883\ncolour: blue\n")
    with pytest.raises(TestbedError) as exc:
        load_scenario(str(p))
    assert f"{p}:4: colour: unknown key" in exc.value.evidence


def test_bad_yaml_syntax_names_file_and_line(tmp_path):
    p = _write(tmp_path, "name: mine\ntransport: [plain\nport: 1883\n")
    with pytest.raises(TestbedError) as exc:
        load_scenario(str(p))
    assert str(p) in exc.value.message and "invalid YAML" in exc.value.message


def test_port_out_of_range_names_field(tmp_path):
    p = _write(tmp_path, "name: mine\ntransport: plain\nport: 70000\n")
    with pytest.raises(TestbedError) as exc:
        load_scenario(str(p))
    assert f"{p}:3: port:" in exc.value.evidence


def test_ecdsa_suite_needs_ecdsa_key(tmp_path):
    p = _write(tmp_path, "name: mine\ntransport: tls\nport: 8883\ntls:\n  max_version: '1.2'\n"
                         "  key_type: rsa2048\n  ciphers_tls12: [ECDHE-ECDSA-CHACHA20-POLY1305]\n")
    with pytest.raises(TestbedError) as exc:
        load_scenario(str(p))
    assert "needs an ECDSA certificate" in exc.value.evidence


def test_tls13_allowed_without_tls13_list_is_refused(tmp_path):
    p = _write(tmp_path, "name: mine\ntransport: tls\nport: 8883\ntls:\n"
                         "  ciphers_tls12: [ECDHE-ECDSA-CHACHA20-POLY1305]\n")
    with pytest.raises(TestbedError) as exc:
        load_scenario(str(p))
    assert "ciphers_tls13 is empty" in exc.value.evidence


def test_unknown_scenario_lists_known_ones():
    with pytest.raises(TestbedError) as exc:
        load_scenario("tlz")
    assert "plain, tls, tls-aes128gcm, tls-noticket, tls13-chacha20" in exc.value.message


def test_user_yaml_file_loads(tmp_path):
    p = _write(tmp_path, "name: rsa-chacha\ntransport: tls\nport: 8884\ntls:\n  max_version: '1.2'\n"
                         "  key_type: rsa2048\n  ciphers_tls12: [ECDHE-RSA-CHACHA20-POLY1305]\n")
    s = load_scenario(str(p))
    assert s.expected_suite().code == 0xCCA8 and s.port == 8884
