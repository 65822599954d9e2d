"""Support for the firmware host tests: a cmake build of firmware/platformio/host, throwaway
ECDSA P-256 certificates, and real Mosquitto brokers on free 127.0.0.1 ports."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.skips import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
HOST_SRC = REPO / "firmware" / "platformio" / "host"
MOSQUITTO = "/usr/sbin/mosquitto"
FETCH_MBEDTLS36 = HOST_SRC / "mbedtls3" / "fetch_debian_mbedtls.py"


def compiler_cache() -> list[str]:
    """cmake configure arguments that send every compile through ccache when it is installed (scripts/ensure-system.sh
    installs it as root): the firmware tier builds the core several times in fresh temporary folders, and a `make check`
    after an edit then compiles only what changed. CCACHE_BASEDIR=/ makes the temporary folders' absolute paths
    relative and CCACHE_NOHASHDIR=1 leaves the build folder out of the hash (-g would put it in), so that a build in
    another folder hits the same entries (here: the host build 21.5 s cold, 1.9 s from the cache). Without ccache the
    same build, only slower."""
    if shutil.which("ccache") is None:
        return []
    return [f"-DCMAKE_{lang}_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=/;CCACHE_NOHASHDIR=1;ccache" for lang in ("C", "CXX")]


def configure_argv(src: Path, build: Path, *extra: str) -> list[str]:
    """The cmake configure of a host build of the core: warnings as errors, through the compiler cache."""
    return ["cmake", "-S", str(src), "-B", str(build), "-DTESTBED_WERROR=ON", *compiler_cache(), *extra]


def need_tool(path_or_name: str, package: str) -> str:
    """The tool's path; fail (CI) or skip (elsewhere) with the package to install."""
    found = (
        path_or_name
        if os.path.isabs(path_or_name) and os.access(path_or_name, os.X_OK)
        else shutil.which(path_or_name)
    )
    if found:
        return found
    skip_or_fail(f"{path_or_name} not found: apt-get install -y {package}")


def realtime(argv: list[str]) -> list[str]:
    """``argv`` run under the real-time scheduler (SCHED_FIFO, priority 10) when root may: a device whose own clock is
    held against the wire's. Its wake-up after each read is part of the wire's device time and not of the device's
    (its clock cannot see it); under SCHED_OTHER a loaded host delays that wake-up by milliseconds (make test's
    lanes beside helpers, load 5: a TLS 1.3 device's resumed handshakes 0.67 ms apart against a 0.25 ms bound, one
    run in two), under SCHED_FIFO it preempts every ordinary process at once. The kernel keeps 5 % of each second
    for ordinary processes (kernel.sched_rt_runtime_us), and the device sleeps between its connections. As a user
    (no CAP_SYS_NICE), the argv unchanged."""
    chrt = shutil.which("chrt")
    if os.geteuid() != 0 or chrt is None:
        return argv
    return [chrt, "--fifo", "10", *argv]


@dataclass(frozen=True)
class HostBuild:
    build_dir: Path
    vdevice: Path
    test_core: Path
    board_emu: Path


@pytest.fixture(scope="session")
def host_build(tmp_path_factory: pytest.TempPathFactory) -> HostBuild:
    """Configure and build firmware/platformio/host with warnings as errors."""
    need_tool("cmake", "cmake")
    need_tool("g++", "g++")
    build = tmp_path_factory.mktemp("fw-host-build")
    configure = subprocess.run(
        configure_argv(HOST_SRC, build),
        capture_output=True,
        text=True,
        check=False,
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    compile_ = subprocess.run(
        ["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, check=False
    )
    assert compile_.returncode == 0, compile_.stdout[-4000:] + compile_.stderr[-4000:]
    return HostBuild(build, build / "vdevice", build / "test_core", build / "board-emu")


FIRMWARE = REPO / "firmware" / "platformio"
DEF_IN_FIRMWARE = Path("lib/testbed_core/src/device_options.def")


def tree_files(root: Path) -> dict[str, bytes]:
    """Every file under root, by its path relative to root."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class DefLinesBuild:
    """firmware/platformio copied with lines appended to its device_options.def, and built."""

    original: dict[str, bytes]  # firmware/platformio as it was copied
    copy: Path                  # the copy (its .def: copy / DEF_IN_FIRMWARE)
    build: Path                 # the cmake build folder: vdevice, fleet, board-emu, ...
    lines: str

    @property
    def def_file(self) -> Path:
        return self.copy / DEF_IN_FIRMWARE


def build_with_def_lines(root: Path, lines: str, targets: tuple[str, ...] = ("vdevice", "fleet", "board-emu")
                         ) -> DefLinesBuild:
    """A throwaway device option's C++ half: firmware/platformio copied into root, `lines` (whole .def lines, e.g.
    "TB_OPT_UINT(knob, 1, 9, 3)\\n") appended to the copy's device_options.def and nothing else changed, and
    `targets` built from the copy as host_build builds (configure_argv: warnings as errors, the compiler cache).
    The Python half can read the copy's .def (orchestrator/publishers/board/protocol_def.py read_def(path))."""
    need_tool("cmake", "cmake")
    need_tool("g++", "g++")
    original = tree_files(FIRMWARE)
    copy = root / "platformio"
    for name, data in original.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(data)
    with (copy / DEF_IN_FIRMWARE).open("a") as f:
        f.write(lines)
    build = root / "build"
    for argv in (configure_argv(copy / "host", build), ["cmake", "--build", str(build), "-j2", "--target", *targets]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1200)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return DefLinesBuild(original, copy, build, lines)


@dataclass(frozen=True)
class Build36:
    vdevice: Path
    include: Path
    fleet: Path | None = None  # the 3.6 build of the fleet (build36 makes it; the padding-1 build does not)


@pytest.fixture(scope="session")
def build36(tmp_path_factory: pytest.TempPathFactory) -> Build36:
    """vdevice and the fleet built on this Debian 12 host against Debian 13's mbedTLS 3.6 package (device_stack
    mbedtls-3.6), fetched and unpacked by firmware/platformio/host/mbedtls3/fetch_debian_mbedtls.py."""
    need_tool("cmake", "cmake")
    need_tool("g++", "g++")
    need_tool("dpkg-deb", "dpkg")
    fetched = subprocess.run([sys.executable, str(FETCH_MBEDTLS36)], capture_output=True, text=True, check=False,
                             timeout=300)
    assert fetched.returncode == 0, fetched.stderr  # CI fetches it: Debian's archive is this machine's registry
    args = fetched.stdout.split()
    build = tmp_path_factory.mktemp("fw-host-mbedtls36")
    for argv in (configure_argv(HOST_SRC, build, *args),
                 ["cmake", "--build", str(build), "-j2", "--target", "vdevice", "fleet"]):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    include = Path(next(a for a in args if a.startswith("-DMBEDTLS_INCLUDE_DIR=")).split("=", 1)[1])
    return Build36(build / "vdevice", include, build / "fleet")


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey | None,
    *,
    ca: bool,
    sans: list[x509.GeneralName],
    expired: bool = False,
) -> x509.Certificate:
    """Valid from 5 minutes ago for 2 days; `expired`: valid for about 2 days until an hour ago."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC) - (dt.timedelta(days=2) if expired else dt.timedelta(0))
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + (dt.timedelta(days=1, hours=23) if expired else dt.timedelta(days=2)))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def broker_may_read(key: Path) -> None:
    """A 0600 key owned by the `mosquitto` user, to which Mosquitto drops when started as root."""
    if os.geteuid() == 0:
        try:
            broker_user = pwd.getpwnam("mosquitto")
            os.chown(key, broker_user.pw_uid, broker_user.pw_gid)
        except KeyError:
            pass


@pytest.fixture(scope="session")
def pki() -> Iterator[Pki]:
    """CA + ECDSA P-256 server certificate (SAN DNS:localhost, IP:127.0.0.1) + client certificate.

    The directory is world-traversable and the files readable by the `mosquitto` user, to which
    Mosquitto drops when started as root."""
    directory = Path(tempfile.mkdtemp(prefix="tb-fw-pki-"))
    directory.chmod(0o755)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _cert("testbed test CA", ca_key, None, None, ca=True, sans=[])
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _cert(
        "localhost",
        server_key,
        ca_cert.subject,
        ca_key,
        ca=False,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _cert("v1", client_key, ca_cert.subject, ca_key, ca=False, sans=[])
    paths = Pki(
        directory,
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
    )
    paths.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    paths.client_cert.write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, paths.server_key)
    _write_key(client_key, paths.client_key)
    for p in (paths.ca, paths.server_cert, paths.client_cert):
        p.chmod(0o644)
    for p in (paths.server_key, paths.client_key):
        p.chmod(0o600)
    broker_may_read(paths.server_key)
    yield paths
    shutil.rmtree(directory, ignore_errors=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mosquitto exited ({proc.returncode}):\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(
        f"mosquitto did not listen on {port} within {timeout} s:\n{log.read_text(errors='replace')}"
    )


class LoCapture:
    """dumpcap on lo for ``ports`` (root only), stopped with SIGINT so that it flushes.

    Ready once dumpcap has counted a packet: its "Capturing on" line comes before packets are taken, and under load
    (CI beside make check's halves) a run's first SYN, ClientHello or server flight were missing (CI stop 34: the first
    full handshake's Certificate). The probe is a connection refused by a free port the filter also takes (a SYN and
    a RST): the broker sees nothing, and the probe is none of the ports' streams."""

    def __init__(self, path: Path, *ports: int) -> None:
        self.path, self.log = path, path.with_suffix(".log")
        probe = free_port()
        port_filter = " or ".join(f"tcp port {port}" for port in (*ports, probe))
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(["dumpcap", "-i", "lo", "-f", port_filter, "-w", str(path)],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while "Packets:" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"dumpcap took no packet:\n{self.log.read_text(errors='replace')}")
            with suppress(OSError):
                socket.create_connection(("127.0.0.1", probe), timeout=1).close()
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            time.sleep(0.3)  # the last segments (FIN/ACK) reach the capture
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=15)


@contextmanager
def mosquitto_running(conf: Path, log: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Mosquitto with ``conf`` (its output in ``log``), listening on ``port`` for the block; stopped after it."""
    with log.open("wb") as out:
        proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        wait_port(port, proc, log)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Broker:
    tls_port: int
    plain_port: int
    log: Path
    proc: subprocess.Popen[bytes]


@pytest.fixture
def broker_factory(pki: Pki, tmp_path: Path) -> Iterator:
    """Starts Mosquitto 2.0 with one TLS 1.2 listener limited to `ciphers` and one plain listener
    (for an independent subscriber). Every broker is stopped at teardown. `server` (certificate, key)
    replaces the pki's server certificate; `tls_version` is Mosquitto's (a minimum); `openssl_conf`,
    the text of an OPENSSL_CONF for the broker, caps what Mosquitto cannot (e.g. MaxProtocol)."""
    need_tool(MOSQUITTO, "mosquitto")
    started: list[Broker] = []

    def start(
        ciphers: str,
        *,
        require_certificate: bool = False,
        server: tuple[Path, Path] | None = None,
        tls_version: str = "tlsv1.2",
        openssl_conf: str | None = None,
    ) -> Broker:
        tls_port, plain_port = free_port(), free_port()
        certfile, keyfile = server or (pki.server_cert, pki.server_key)
        env = dict(os.environ)
        if openssl_conf is not None:
            env["OPENSSL_CONF"] = str(tmp_path / f"openssl-{tls_port}.cnf")
            Path(env["OPENSSL_CONF"]).write_text(openssl_conf)
        conf = tmp_path / f"mosquitto-{tls_port}.conf"
        log = tmp_path / f"mosquitto-{tls_port}.log"
        conf.write_text(
            "\n".join(
                [
                    "persistence false",
                    "log_dest stderr",
                    "log_type error",
                    "log_type warning",
                    "log_type notice",
                    "log_type information",
                    f"listener {plain_port} 127.0.0.1",
                    "allow_anonymous true",
                    f"listener {tls_port} 127.0.0.1",
                    f"cafile {pki.ca}",
                    f"certfile {certfile}",
                    f"keyfile {keyfile}",
                    f"tls_version {tls_version}",
                    f"ciphers {ciphers}",
                    f"require_certificate {'true' if require_certificate else 'false'}",
                    "",
                ]
            )
        )
        conf.chmod(0o644)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [MOSQUITTO, "-c", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        broker = Broker(tls_port, plain_port, log, proc)
        started.append(broker)
        wait_port(tls_port, proc, log)
        wait_port(plain_port, proc, log)
        return broker

    yield start
    for broker in started:
        if broker.proc.poll() is None:
            broker.proc.send_signal(signal.SIGTERM)
            try:
                broker.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                broker.proc.wait()
