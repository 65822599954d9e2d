"""Scenario: what the broker offers and what our clients (publisher, subscriber) ask for."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from orchestrator.errors import TestbedError
from orchestrator.model import ciphers
from orchestrator.model.ciphers import CipherSuite, TlsVersion
from orchestrator.model.yamlfile import Finite, load_model

KeyType = Literal["rsa2048", "ecdsa-p256"]
ClientAuth = Literal["none", "password", "certificate"]


class TlsSettings(Finite):
    model_config = ConfigDict(extra="forbid")

    min_version: TlsVersion = "1.2"
    max_version: TlsVersion = "1.3"
    ciphers_tls12: list[str] = Field(default_factory=list, description="OpenSSL names, broker preference order")
    ciphers_tls13: list[str] = Field(default_factory=list, description="TLS 1.3 suite names")
    key_type: KeyType = "ecdsa-p256"
    client_auth: ClientAuth = "password"
    session_tickets: bool = Field(default=True, description="false: the broker issues and accepts no TLS 1.2 "
                                  "session ticket (OpenSSL Options = -SessionTicket); its session-ID cache stays")
    client_max_version: TlsVersion = Field(
        "1.2", description="highest version our clients offer; the ESP32's mbedTLS 2.28 speaks TLS 1.2")

    @model_validator(mode="after")
    def _check(self) -> TlsSettings:
        if self.min_version > self.max_version:
            raise ValueError(f"min_version {self.min_version} is above max_version {self.max_version}")
        for version, names in (("1.2", self.ciphers_tls12), ("1.3", self.ciphers_tls13)):
            for name in names:
                suite = ciphers.lookup(name, version)  # type: ignore[arg-type]
                if suite is None:
                    valid = ", ".join(ciphers.valid_names(version))  # type: ignore[arg-type]
                    raise ValueError(f"unknown TLS {version} cipher suite {name!r}; valid: {valid}")
        if self.min_version == "1.2" and not self.ciphers_tls12:
            raise ValueError("ciphers_tls12 is empty but TLS 1.2 is allowed (min_version 1.2)")
        if self.max_version == "1.3" and not self.ciphers_tls13:
            raise ValueError("ciphers_tls13 is empty but TLS 1.3 is allowed (max_version 1.3): Mosquitto would "
                             "otherwise accept every TLS 1.3 suite")
        want = "ECDSA" if self.key_type == "ecdsa-p256" else "RSA"
        for name in self.ciphers_tls12:
            suite = ciphers.lookup(name, "1.2")
            if suite is not None and suite.auth != want:
                raise ValueError(f"cipher suite {name} needs an {suite.auth} certificate but key_type is "
                                 f"{self.key_type}")
        return self

    def suites(self, version: TlsVersion) -> list[CipherSuite]:
        names = self.ciphers_tls12 if version == "1.2" else self.ciphers_tls13
        found = [ciphers.lookup(n, version) for n in names]
        return [s for s in found if s is not None]

    @property
    def client_version(self) -> TlsVersion:
        """The version our clients negotiate: the highest both sides allow."""
        return min(self.client_max_version, self.max_version)  # type: ignore[return-value]


class Scenario(Finite):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,39}$")
    description: str = ""
    transport: Literal["plain", "tls"]
    port: int = Field(ge=1, le=65535)
    allow_anonymous: bool | None = Field(
        None, description="plain only; TLS scenarios authenticate with password or certificate")
    tls: TlsSettings | None = None

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.transport == "tls" and self.tls is None:
            raise ValueError("transport is tls but the tls section is missing")
        if self.transport == "plain" and self.tls is not None:
            raise ValueError("transport is plain but a tls section is given")
        if self.transport == "tls" and self.tls is not None:
            if self.tls.client_version < self.tls.min_version:
                raise ValueError(f"our clients offer at most TLS {self.tls.client_max_version} but the broker "
                                 f"requires at least TLS {self.tls.min_version}")
        return self

    @property
    def is_tls(self) -> bool:
        return self.transport == "tls"

    @property
    def anonymous(self) -> bool:
        if self.transport == "plain":
            return True if self.allow_anonymous is None else self.allow_anonymous
        assert self.tls is not None
        return self.tls.client_auth == "none"

    def expected_suite(self) -> CipherSuite | None:
        """The suite our clients must negotiate (the broker's first allowed for the client's version)."""
        if self.tls is None:
            return None
        suites = self.tls.suites(self.tls.client_version)
        return suites[0] if suites else None

    def client_ciphers_openssl(self) -> list[str]:
        """TLS 1.2 cipher list our Python clients pass to SSLContext.set_ciphers."""
        return [s.openssl for s in self.tls.suites("1.2")] if self.tls else []

    def client_cipher_iana(self) -> list[str]:
        """Cipher suites (IANA names) our clients offer, for vdevice / the ESP32's mbedTLS."""
        if self.tls is None:
            return []
        return [s.iana for s in self.tls.suites(self.tls.client_version)]


def builtin_names() -> list[str]:
    folder = resources.files("orchestrator.scenarios")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name, or a user's YAML file by path."""
    text = str(name_or_path)
    looks_like_path = text.endswith((".yaml", ".yml")) or "/" in text
    if looks_like_path:
        path = Path(text)
        if not path.is_file():
            raise TestbedError(f"scenario file not found: {path}")
        return load_model(Scenario, path)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", text) or text not in builtin_names():
        raise TestbedError(f"unknown scenario {text!r}; known: {', '.join(builtin_names())} "
                           "(or give a path to your own .yaml)")
    resource = resources.files("orchestrator.scenarios") / f"{text}.yaml"
    with resources.as_file(resource) as path:
        return load_model(Scenario, path)
