"""Firmware settings for a scenario: what the real ESP32 is built with (transport, port, suites, CA,
credentials), from the scenario model and the run's throwaway PKI. PlatformIO itself is in
orchestrator/backends/platformio.py."""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends.platformio import DEFAULT_DEVICE_ID, FirmwareSettings
from orchestrator.lab.pki import ensure_pki
from orchestrator.model.scenario import load_scenario


def settings_for_scenario(scenario_name: str, pki_dir: Path, *, payload: int, samples: int, interval_ms: int,
                          qos: int, device_id: str = DEFAULT_DEVICE_ID, marker_pin: int | None = None
                          ) -> FirmwareSettings:
    """The firmware's settings for a scenario: reads the scenario model and the PKI."""
    scenario = load_scenario(scenario_name)
    ca_pem = username = password = cert_pem = key_pem = None
    if scenario.tls is not None:
        wants_cert = scenario.tls.client_auth == "certificate"
        pki = ensure_pki(pki_dir, scenario.tls.key_type, clients=wants_cert)
        ca_pem = pki.ca_cert.read_text()
        if wants_cert:
            cert_pem = pki.client_cert("publisher").read_text()
            key_pem = pki.client_key("publisher").read_text()
        elif scenario.tls.client_auth == "password":
            username, password = "publisher", pki.password_for("publisher")
    elif not scenario.anonymous:
        pki = ensure_pki(pki_dir, "ecdsa-p256")
        username, password = "publisher", pki.password_for("publisher")
    return FirmwareSettings(scenario=scenario.name, transport=scenario.transport, port=scenario.port,
                            ciphers_iana=tuple(scenario.client_cipher_iana()), payload=payload,
                            samples=samples, interval_ms=interval_ms, qos=qos, device_id=device_id,
                            ca_pem=ca_pem, username=username, password=password, client_cert_pem=cert_pem,
                            client_key_pem=key_pem, marker_pin=marker_pin)
