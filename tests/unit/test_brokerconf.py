from orchestrator.lab.brokerconf import render_mosquitto_conf, render_openssl_conf
from orchestrator.model.scenario import load_scenario


def _directives(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_tls_has_no_plaintext_listener_and_only_chacha():
    conf = _directives(render_mosquitto_conf(load_scenario("tls")))
    assert [d for d in conf if d.startswith("listener")] == ["listener 8883 0.0.0.0"]
    assert "ciphers ECDHE-ECDSA-CHACHA20-POLY1305" in conf
    assert "ciphers_tls1.3 TLS_CHACHA20_POLY1305_SHA256" in conf
    assert "tls_version tlsv1.2" in conf
    assert "allow_anonymous false" in conf
    assert any(d.startswith("password_file ") for d in conf)


def test_plain_is_anonymous_on_1883_without_tls():
    conf = _directives(render_mosquitto_conf(load_scenario("plain")))
    assert [d for d in conf if d.startswith("listener")] == ["listener 1883 0.0.0.0"]
    assert "allow_anonymous true" in conf
    assert not any(d.startswith(("cafile", "certfile", "ciphers")) for d in conf)


def test_tls12_only_scenario_caps_openssl_and_tls_scenario_does_not():
    aes = render_openssl_conf(load_scenario("tls-aes128gcm"))
    assert aes is not None and "MaxProtocol = TLSv1.2" in aes
    assert render_openssl_conf(load_scenario("tls")) is None
    assert render_openssl_conf(load_scenario("plain")) is None


def test_tls13_only_scenario_sets_minimum_13():
    conf = _directives(render_mosquitto_conf(load_scenario("tls13-chacha20")))
    assert "tls_version tlsv1.3" in conf
    assert not any(d.startswith("ciphers ") for d in conf)


def test_tickets_off_is_an_openssl_option_and_combines_with_the_tls12_cap():
    noticket = load_scenario("tls-noticket")
    conf = render_openssl_conf(noticket)
    assert conf is not None and "Options = -SessionTicket" in conf and "MaxProtocol" not in conf
    capped = noticket.model_copy(update={"tls": noticket.tls.model_copy(update={"max_version": "1.2",
                                                                                 "ciphers_tls13": []})})
    both = render_openssl_conf(capped)
    assert both is not None and "MaxProtocol = TLSv1.2\nOptions = -SessionTicket\n" in both
