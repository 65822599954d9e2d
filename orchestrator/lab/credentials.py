"""Who gets which secret of a run (issue 22): a device reads its password from a 0600 file (vdevice's and the
fleet's --password-file), never from an argv, and each lab host is sent what its role needs and nothing more.

The run folder's pki/ holds the CA key, every private key and passwords.txt (``user:password`` lines). Of it:

* the broker host (broker, capture, subscriber) gets the CA certificate, the server's certificate and key, the
  subscriber's own credentials (its certificate and key, or a passwords.txt with its line only) and the broker's
  password file already hashed as Mosquitto's ``$7$`` (PBKDF2-SHA512, what ``mosquitto_passwd`` writes),
  pki/passwords.hashed, so the publisher's password never reaches it in clear (the native broker copies it, the
  broker image too when it finds it: images/broker/entrypoint.sh);
* the publisher host gets the CA certificate, its own certificate and key (certificate auth) or its password
  alone in pki/publisher.password (first line), which the device reads with --password-file (on this host the
  publisher container reads the run folder's, written for the cell and removed after it);
* a router gets nothing; the CA key goes to no host.

Every file is sent 0600 (certificates 0644) inside the lab folder, which the teardown removes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from orchestrator.lab.pki import Pki
from orchestrator.model.scenario import Scenario

DEVICE_USER = "publisher"
SUBSCRIBER_USER = "subscriber"
HASHED_PASSWORDS = "passwords.hashed"  # pki/: the broker's password file, Mosquitto's hashes
MOSQUITTO_ITERATIONS = 101  # mosquitto_passwd's default (PW_DEFAULT_ITERATIONS)
MOSQUITTO_SALT_BYTES = 12


def uses_password(scenario: Scenario) -> bool:
    """Clients authenticate with a user name and password (plain with anonymous off, or TLS with password auth)."""
    return not scenario.anonymous and (scenario.tls is None or scenario.tls.client_auth == "password")


def uses_certificates(scenario: Scenario) -> bool:
    return scenario.tls is not None and scenario.tls.client_auth == "certificate"


def device_password_file(pki: Pki, user: str = DEVICE_USER) -> Path:
    """pki/<user>.password: the device's one password (its first line)."""
    return pki.folder / f"{user}.password"


def write_device_password(pki: Pki, user: str = DEVICE_USER) -> Path:
    """The device's password file, 0600 from its creation; its path."""
    path = device_password_file(pki, user)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(pki.password_for(user) + "\n")
    os.chmod(path, 0o600)
    return path


def mosquitto_hash(password: str, salt: bytes | None = None, iterations: int = MOSQUITTO_ITERATIONS) -> str:
    """A password as Mosquitto 2's password file stores it: ``$7$<iterations>$<salt>$<PBKDF2-SHA512>`` (base64)."""
    salt = secrets.token_bytes(MOSQUITTO_SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def hashed_passwords(pki: Pki) -> bytes:
    """passwords.txt with every password hashed: Mosquitto's password_file, no password in clear."""
    out = []
    for line in pki.passwords.read_text().splitlines():
        user, sep, password = line.partition(":")
        if sep:
            out.append(f"{user}:{mosquitto_hash(password)}\n")
    return "".join(out).encode()


def copied_files(role: str, scenario: Scenario) -> list[str]:
    """pki/ files a host of ``role`` gets as they are (paths in the run folder)."""
    if role == "broker":
        tls = ["pki/ca.crt", "pki/server.crt", "pki/server.key"] if scenario.tls is not None else []
        client = [f"pki/{SUBSCRIBER_USER}.crt", f"pki/{SUBSCRIBER_USER}.key"] if uses_certificates(scenario) else []
        return tls + client
    if role == "publisher":
        tls = ["pki/ca.crt"] if scenario.tls is not None else []
        client = [f"pki/{DEVICE_USER}.crt", f"pki/{DEVICE_USER}.key"] if uses_certificates(scenario) else []
        return tls + client
    return []


def made_files(role: str, scenario: Scenario, pki: Pki | None) -> dict[str, bytes]:
    """Secret files made for a host of ``role`` (path in the run folder -> content): the broker host's hashed
    password file and the subscriber's own password; the publisher host's password."""
    if pki is None or not uses_password(scenario):
        return {}
    if role == "broker":
        mine = f"{SUBSCRIBER_USER}:{pki.password_for(SUBSCRIBER_USER)}\n".encode()
        return {f"pki/{HASHED_PASSWORDS}": hashed_passwords(pki), "pki/passwords.txt": mine}
    if role == "publisher":
        return {f"pki/{device_password_file(pki).name}": (pki.password_for(DEVICE_USER) + "\n").encode()}
    return {}
