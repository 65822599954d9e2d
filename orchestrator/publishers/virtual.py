"""The virtual ESP32: the vdevice container (images/publisher), one compose service started per run.

Its entrypoint waits for config/publisher.go (see compose/testbed.yml), so the orchestrator can apply
the impairment to its network namespace before the first packet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.backends import compose, docker
from orchestrator.backends.compose import KeptServices, Topology
from orchestrator.backends.images import image_exists
from orchestrator.backends.images import spec as image_spec
from orchestrator.errors import TestbedError
from orchestrator.lab import credentials
from orchestrator.lab.pki import Pki
from orchestrator.model.device_args import device_argv
from orchestrator.model.layout import Layout
from orchestrator.model.run import FLEET_PREFIX, RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.results.atomic import read_json

SERVICE = "publisher"
# device_stack -> the image the device (vdevice, or the fleet) runs in: the same core on another mbedTLS
STACK_IMAGES = {"mbedtls-2.28": "publisher", "mbedtls-3.6": "publisher-mbedtls36"}


# What the mbedTLS 3.6 device offers for TLS 1.3, as the firmware's env esp32dev-idf5-tls13 does
# (include/mbedtls3_chacha_only.h): the scenario's TLS 1.3 suites, then the study's TLS 1.2 suite for a server
# that speaks TLS 1.2 only - so the ClientHello carries both lists, 0x1303 and 0xCCA9.
TLS12_FALLBACK = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"


def device_ciphers(scenario: Scenario, device_stack: str) -> list[str]:
    suites = scenario.client_cipher_iana()
    if (device_stack == "mbedtls-3.6" and scenario.tls is not None and scenario.tls.client_version == "1.3"
            and TLS12_FALLBACK not in suites):
        suites = [*suites, TLS12_FALLBACK]
    return suites


def publisher_image(device_stack: str) -> str:
    """The image tag of a device stack; refused by name when it is not built (compose would otherwise build
    the service's own Dockerfile, the 2.28 one, under that tag)."""
    name = STACK_IMAGES[device_stack]
    tag = image_spec(name).tag
    if not image_exists(tag):
        raise TestbedError(f"--device-stack {device_stack} needs the image {tag}, which is not built",
                           hint=f"testbed images build {name}")
    return tag


def publisher_args(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec,
                   host: str = "broker") -> list[str]:
    """vdevice's command line for one run (``host``: the broker's address behind the router; the TLS
    server name stays `broker`); for a fleet (``spec.devices`` > 1) the fleet's, which takes the same
    connection options and connection lifecycle for every device."""
    args = connection_args(scenario, lay, pki, spec, host)
    lifecycle = device_argv(spec.axes, spec.values(), "connection")  # none when persistent: the study's cells
    if lifecycle:                                                     # keep their command line unchanged
        lifecycle += ["--connections-log", lay.in_container(lay.publisher_connections)]
    if spec.is_fleet:
        return ["fleet", *device_argv(spec.axes, spec.values(), "fleet"),
                "--device-prefix", FLEET_PREFIX, "--out-dir", lay.in_container(lay.fleet_dir), *args,
                *device_argv(spec.axes, spec.values(), "lifecycle"), *lifecycle]
    return ["vdevice", *args, "--device-id", spec.device_id, "--client-id", "testbed-publisher",
            "--send-log", lay.in_container(lay.publisher_log), "--summary", lay.in_container(lay.publisher_summary),
            *device_argv(spec.axes, spec.values(), "lifecycle"), *lifecycle]


def connection_args(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, host: str) -> list[str]:
    """What vdevice and the fleet share: where, how (plain or TLS, credentials) and what to publish."""
    args = ["--host", host, "--port", str(scenario.port),
            "--transport", "tls" if scenario.is_tls else "plain", *device_argv(spec.axes, spec.values(), "publish")]
    if scenario.tls is not None:
        args += ["--ciphers", ",".join(device_ciphers(scenario, spec.device_stack)),
                 "--ca", lay.in_container(lay.pki / "ca.crt"), "--server-name", "broker",
                 "--keylog", lay.in_container(lay.keylogs / "publisher.keys")]
        if scenario.tls.client_auth == "certificate":
            args += ["--cert", lay.in_container(lay.pki / "publisher.crt"),
                     "--key", lay.in_container(lay.pki / "publisher.key")]
    if pki is not None and credentials.uses_password(scenario):
        # the password is on no command line (ps shows every argv on the host): the device reads it from a 0600
        # file, written by start below (on a lab host: sent by lab/remote.py)
        args += ["--username", credentials.DEVICE_USER,
                 "--password-file", lay.in_container(credentials.device_password_file(pki))]
    return args


@dataclass(frozen=True)
class VirtualPublisher:
    scenario: Scenario
    lay: Layout
    pki: Pki | None
    spec: RunSpec
    service: str = SERVICE
    host: str = "broker"  # where it connects: the broker's lab address when it sits behind the router
    kept: KeptServices | None = None  # a kept-up lab's clients: the device is a program in their publisher container

    def start(self, topo: Topology) -> None:
        args = publisher_args(self.scenario, self.lay, self.pki, self.spec, self.host)
        if self.spec.is_fleet:  # the fleet writes its device logs there, as the container's user
            self.lay.fleet_dir.mkdir(parents=True, exist_ok=True)
        if self.pki is not None and credentials.uses_password(self.scenario):
            credentials.write_device_password(self.pki)
        compose.start_service(replace(topo, publisher_args=args,
                                      publisher_image=publisher_image(self.spec.device_stack)), self.service)

    def go(self) -> None:
        self.lay.publisher_go.touch()

    def wait_exit(self, timeout_s: float) -> int | None:
        if self.kept is not None:
            return self.kept.wait_exit(self.service, timeout_s)
        return docker.wait_exited(compose.container_name(self.service), timeout_s)

    def stop(self) -> None:
        """The device's password file removed (read when it started; pki/passwords.txt keeps the run's); the
        teardown stops and removes the container (its log and state saved first); in a kept-up lab's container
        the device's program still running is ended."""
        if self.kept is not None:
            self.kept.stop(self.service)
        if self.pki is not None:
            credentials.device_password_file(self.pki).unlink(missing_ok=True)

    def error(self) -> str:
        """The errors vdevice (or the fleet) wrote to its summary, else the last line it printed."""
        summary = read_json(self.lay.fleet_dir / "summary.json" if self.spec.is_fleet else self.lay.publisher_summary)
        errors = summary.get("errors") if summary else None
        if errors:
            return "; ".join(str(e) for e in errors[:5]) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else "")
        text = self.kept.log_tail(self.service) if self.kept is not None else compose.logs([self.service], tail=20)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else "publisher exited with an error and printed nothing"
