"""Who gets which secret of a run (orchestrator/lab/credentials.py, issue 22): each lab host's archive holds what
its role needs (no CA key anywhere, the publisher's password only on the publisher host, the broker's password file
hashed), secrets land 0600 in a 0700 pki/, and no device command line carries a password."""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.impairment.targets import parse_inventory_listing
from orchestrator.backends.multihost import LAB_GROUPS, roles_of
from orchestrator.lab import credentials, remote
from orchestrator.lab.topology import prepare_run_dir
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.publishers.virtual import publisher_args
from tests.skips import skip_or_fail


def _roles(runtime: str) -> Any:
    listing = {"all": {"children": ["broker", "publisher", "router"]}, "broker": {"hosts": ["b1"]},
               "publisher": {"hosts": ["p1"]}, "router": {"hosts": ["r1"]},
               "_meta": {"hostvars": {"b1": {"ansible_host": "10.0.2.10", "testbed_broker_runtime": runtime},
                                      "p1": {"ansible_host": "10.0.1.10"},
                                      "r1": {"impair_ingress_interface": "eth1"}}}}
    return roles_of(parse_inventory_listing(listing, "lab.yml", LAB_GROUPS))


def scenario(kind: str) -> Scenario:
    """tls (password auth), mtls (certificate auth), plain-auth (plain with a password), plain (anonymous)."""
    if kind == "mtls":
        sc = load_scenario("tls")
        assert sc.tls is not None
        return sc.model_copy(update={"tls": sc.tls.model_copy(update={"client_auth": "certificate"})})
    if kind == "plain-auth":
        return load_scenario("plain").model_copy(update={"allow_anonymous": False})
    return load_scenario(kind)


def staged(tmp_path: Path, kind: str, runtime: str = "native") -> tuple[dict[str, dict[str, Any]], Any, Any]:
    """host -> {name in its archive: (TarInfo, content)}; the run's Pki; the roles."""
    sc = scenario(kind)
    lay, pki = prepare_run_dir(tmp_path / kind / runtime, sc)
    lab = _roles(runtime)
    spec = RunSpec(scenario="tls", samples=5, interval_ms=10, inventory="lab.yml")
    out: dict[str, dict[str, Any]] = {}
    for host, b64 in remote.stage(lay, sc, spec, lab, pki).items():
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(b64)), mode="r:gz") as tar:
            out[host] = {m.name: (m, tar.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
                         for m in tar.getmembers()}
    return out, pki, lab


def pki_files(members: dict[str, Any]) -> set[str]:
    return {n.removeprefix("run/pki/") for n, (m, _d) in members.items() if n.startswith("run/pki/") and m.isfile()}


def test_a_password_scenario_gives_the_broker_hashes_and_the_publisher_its_password_alone(tmp_path: Path) -> None:
    hosts, pki, _lab = staged(tmp_path, "tls")
    broker, pub = hosts["b1"], hosts["p1"]
    assert pki_files(broker) == {"ca.crt", "server.crt", "server.key", "passwords.hashed", "passwords.txt"}
    assert pki_files(pub) == {"ca.crt", "publisher.password"}
    publisher_pw, subscriber_pw = pki.password_for("publisher"), pki.password_for("subscriber")
    assert pub["run/pki/publisher.password"][1] == f"{publisher_pw}\n".encode()
    # the broker host: the subscriber's own line in clear (the subscriber reads it), every password hashed
    assert broker["run/pki/passwords.txt"][1] == f"subscriber:{subscriber_pw}\n".encode()
    hashed = broker["run/pki/passwords.hashed"][1].decode()
    assert [ln.split(":")[0] for ln in hashed.splitlines()] == ["publisher", "subscriber"]
    everything = b"".join(d for h in hosts.values() for _m, d in h.values() if d)
    assert publisher_pw.encode() not in b"".join(d for _m, d in broker.values() if d)
    assert everything.count(publisher_pw.encode()) == 1  # the publisher host's file, nowhere else
    assert pki.ca_key.read_bytes() not in everything and b"PRIVATE KEY" not in b"".join(
        d for _m, d in pub.values() if d)


def test_certificate_auth_gives_each_host_its_own_key_and_no_ca_key(tmp_path: Path) -> None:
    hosts, pki, _lab = staged(tmp_path, "mtls")
    assert pki_files(hosts["b1"]) == {"ca.crt", "server.crt", "server.key", "subscriber.crt", "subscriber.key"}
    assert pki_files(hosts["p1"]) == {"ca.crt", "publisher.crt", "publisher.key"}
    assert hosts["p1"]["run/pki/publisher.key"][1] == pki.client_key("publisher").read_bytes()
    for members in hosts.values():
        assert pki.ca_key.read_bytes() not in b"".join(d for _m, d in members.values() if d)


@pytest.mark.parametrize("kind", ["tls", "mtls", "plain-auth"])
def test_secrets_land_0600_in_a_0700_pki_and_only_certificates_are_readable(tmp_path: Path, kind: str) -> None:
    hosts, _pki, _lab = staged(tmp_path, kind)
    for members in hosts.values():
        assert members["run/pki"][0].mode == 0o700
        for name, (info, _data) in members.items():
            if name.startswith("run/pki/"):
                assert info.mode == (0o644 if name.endswith(".crt") else 0o600), (name, oct(info.mode))


def test_plain_with_a_password_and_anonymous_plain(tmp_path: Path) -> None:
    hosts, _pki, _lab = staged(tmp_path, "plain-auth")
    assert pki_files(hosts["b1"]) == {"passwords.hashed", "passwords.txt"}
    assert pki_files(hosts["p1"]) == {"publisher.password"}
    anonymous, pki, _lab = staged(tmp_path, "plain")
    assert pki is None and pki_files(anonymous["b1"]) == set() and pki_files(anonymous["p1"]) == set()


def test_a_docker_broker_host_gets_the_same_hashed_file(tmp_path: Path) -> None:
    """compose: the broker image copies pki/passwords.hashed as it is (images/broker/entrypoint.sh)."""
    hosts, pki, _lab = staged(tmp_path, "tls", runtime="compose")
    assert pki_files(hosts["b1"]) == {"ca.crt", "server.crt", "server.key", "passwords.hashed", "passwords.txt"}
    assert hosts["b1"]["run/pki/passwords.txt"][1] == f"subscriber:{pki.password_for('subscriber')}\n".encode()
    assert "compose/testbed.yml" in hosts["b1"] and "images/broker/entrypoint.sh" in hosts["b1"]


def test_role_selection_never_names_the_ca_key_or_anothers_key() -> None:
    for kind in ("tls", "mtls", "plain-auth", "plain"):
        sc = scenario(kind)
        broker, publisher = credentials.copied_files("broker", sc), credentials.copied_files("publisher", sc)
        assert "pki/ca.key" not in broker + publisher
        assert "pki/publisher.key" not in broker and "pki/server.key" not in publisher
        assert "pki/passwords.txt" not in broker + publisher  # made per role instead (made_files)
        assert credentials.copied_files("router", sc) == []


def test_no_device_command_line_carries_the_password(tmp_path: Path) -> None:
    sc = scenario("tls")
    lay, pki = prepare_run_dir(tmp_path / "run", sc)
    assert pki is not None
    lab = _roles("native")
    spec = RunSpec(scenario="tls", samples=5, interval_ms=10, inventory="lab.yml")
    argv = publisher_args(sc, lay, pki, spec, host=lab.broker_address)
    fleet = publisher_args(sc, lay, pki, spec.model_copy(update={"devices": 3}))
    for args in (argv, fleet):
        assert "--password" not in args and pki.password_for("publisher") not in " ".join(args)
        assert args[args.index("--username") + 1] == "publisher"
        assert args[args.index("--password-file") + 1] == "/data/pki/publisher.password"  # the container's path
    v = remote.cell_vars(sc, lay, pki, spec, lab, {"b1": "", "p1": ""}, tmp_path, device_argv=argv)["testbed_lab"]
    on_host = v["publisher_argv"]["p1"]
    assert on_host[on_host.index("--password-file") + 1] == "/opt/mqtt-tls-testbed/lab/run/pki/publisher.password"
    assert pki.password_for("publisher") not in repr(v)
    anonymous = scenario("plain")
    lay2, none = prepare_run_dir(tmp_path / "plain", anonymous)
    assert "--password-file" not in publisher_args(anonymous, lay2, none, spec)


def test_the_device_password_file_is_0600_and_holds_the_password_alone(tmp_path: Path) -> None:
    _lay, pki = prepare_run_dir(tmp_path / "run", scenario("tls"))
    assert pki is not None
    path = credentials.write_device_password(pki)
    assert path == pki.folder / "publisher.password" and path.stat().st_mode & 0o777 == 0o600
    assert path.read_text() == pki.password_for("publisher") + "\n"


def test_our_hash_is_mosquittos_and_mosquitto_passwd_agrees() -> None:
    """The $7$ hash recomputed from the salt mosquitto_passwd chose gives its digest byte for byte."""
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        skip_or_fail("mosquitto_passwd is not installed (scripts/ensure-system.sh test installs mosquitto)")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pw"
        path.write_text("publisher:s3cret-Pa55\n")
        subprocess.run([tool, "-U", str(path)], check=True, capture_output=True)
        _user, hashed = path.read_text().strip().split(":", 1)
    _empty, kind, iterations, salt, digest = hashed.split("$")
    assert kind == "7"
    ours = credentials.mosquitto_hash("s3cret-Pa55", base64.b64decode(salt), int(iterations))
    assert ours == hashed
    fresh = credentials.mosquitto_hash("s3cret-Pa55").split("$")
    assert fresh[1:3] == ["7", "101"] and len(base64.b64decode(fresh[3])) == 12
    assert base64.b64decode(fresh[4]) == hashlib.pbkdf2_hmac("sha512", b"s3cret-Pa55", base64.b64decode(fresh[3]),
                                                             101, 64)


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task of a playbook or task file, blocks and plays opened."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(k.startswith("ansible.builtin.") for k in node):
            yield node
        for key in ("tasks", "block", "always", "rescue"):
            yield from _tasks(node.get(key, []))


def test_every_task_that_carries_keys_or_passwords_is_not_logged() -> None:
    """A module logs its arguments on the host (syslog) and in the controller's events unless no_log is set: the
    lab's archive (stdin of a shell task) and deploy.yml's PKI copy must not be."""
    import yaml

    playbooks = Path(__file__).resolve().parents[2] / "playbooks"
    carriers = []
    for path in sorted(playbooks.rglob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            text = repr(task)
            if "testbed_lab.archives" in text or "/pki/" in text and "copy" in text:
                carriers.append((path.name, task["name"], task.get("no_log")))
    assert {name for name, _task, _no_log in carriers} == {"lab_up.yml", "deploy.yml"}
    assert all(no_log is True for _name, _task, no_log in carriers), carriers
