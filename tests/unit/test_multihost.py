"""A lab across hosts (docs/multi-host.md), the pure parts: the inventory's roles, what each host is sent, the
command lines and extra vars of playbooks/lab.yml, and its shell scripts (rendered, then `sh -n`)."""

from __future__ import annotations

import base64
import io
import json
import shlex
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import jinja2
import pytest

from orchestrator.backends.impairment.targets import parse_inventory_listing
from orchestrator.backends.multihost import LAB_GROUPS, load_lab, roles_of
from orchestrator.errors import TestbedError
from orchestrator.lab import remote
from orchestrator.lab.topology import prepare_run_dir
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.publishers.virtual import publisher_args

REPO = Path(__file__).resolve().parents[2]


def listing(**broker: Any) -> dict[str, Any]:
    return {
        "all": {"children": ["broker", "publisher", "router"]},
        "broker": {"hosts": ["b1"]}, "router": {"hosts": ["r1"]},
        "publisher": {"children": ["pis"]}, "pis": {"hosts": ["p1", "esp"]},
        "_meta": {"hostvars": {
            "b1": {"ansible_host": "10.0.2.10", "testbed_remote_dir": "/opt/tb", **broker},
            "p1": {"ansible_host": "10.0.1.10", "testbed_remote_dir": "/srv/tb/"},
            "esp": {"publisher_kind": "esp32", "publisher_ip": "10.0.1.99"},
            "r1": {"ansible_host": "10.0.1.1", "impair_ingress_interface": "eth1", "impair_egress_interface": "eth0"},
        }},
    }


def roles(**broker: Any):  # noqa: ANN201 - LabRoles
    return roles_of(parse_inventory_listing(listing(**broker), "lab.yml", LAB_GROUPS))


def test_roles_come_from_the_groups_with_their_defaults() -> None:
    lab = roles()
    assert (lab.broker.name, lab.broker.address, lab.broker.lab_dir) == ("b1", "10.0.2.10", "/opt/tb/lab")
    assert (lab.publisher.name, lab.publisher.lab_dir) == ("p1", "/srv/tb/lab")  # a trailing slash dropped
    assert lab.runtime == "compose" and lab.broker_address == "10.0.2.10"  # the broker's ansible_host
    assert lab.boards == ["esp"] and [r.name for r in lab.routers] == ["r1"]
    assert [h.name for h in lab.every_host] == ["b1", "p1", "r1"]
    native = roles(testbed_broker_runtime="native", broker_address="192.168.50.10")
    assert (native.runtime, native.broker_address) == ("native", "192.168.50.10")


def test_every_problem_of_an_inventory_is_listed_with_its_host() -> None:
    bad = listing(testbed_broker_runtime="podman", broker_address="broker.lan", testbed_remote_dir="opt/tb")
    bad["broker"]["hosts"] = ["b1", "b2"]
    bad["_meta"]["hostvars"]["esp"].update(publisher_kind="virtual", publisher_weight=0)
    with pytest.raises(TestbedError) as err:
        roles_of(parse_inventory_listing(bad, "lab.yml", LAB_GROUPS))
    assert err.value.message == "lab.yml: the inventory cannot run a lab"
    assert err.value.evidence is not None
    lines = err.value.evidence.splitlines()
    assert "broker: exactly one host is needed, found 2 (b1, b2)" in lines
    assert any(ln.startswith("b1: testbed_broker_runtime: must be native") and "'podman'" in ln for ln in lines)
    assert any(ln.startswith("b1: broker_address: not an IP address ('broker.lan')") for ln in lines)
    assert "esp: publisher_weight: must be a whole number 1..100, its share of a fleet (got 0)" in lines
    assert any(ln.startswith("b1: testbed_remote_dir: must be an absolute folder") for ln in lines)


def test_a_publisher_host_is_needed_and_may_not_be_the_broker() -> None:
    only_boards = listing()
    only_boards["pis"]["hosts"] = ["esp"]
    with pytest.raises(TestbedError) as err:
        roles_of(parse_inventory_listing(only_boards, "lab.yml", LAB_GROUPS))
    assert "publisher: no host with publisher_kind virtual" in (err.value.evidence or "")
    same = listing()
    same["pis"]["hosts"] = ["b1"]
    with pytest.raises(TestbedError) as err:
        roles_of(parse_inventory_listing(same, "lab.yml", LAB_GROUPS))
    assert "b1: is both the broker and the publisher host" in (err.value.evidence or "")


def test_a_lab_without_router_is_a_lab_and_the_example_parses_with_ansible_inventory(tmp_path: Path) -> None:
    no_router = listing()
    del no_router["router"]
    assert roles_of(parse_inventory_listing(no_router, "lab.yml", LAB_GROUPS)).routers == []
    lab, inventory = load_lab(REPO / "playbooks" / "inventory.lab.example.yml")  # the real ansible-inventory
    assert (lab.broker.name, lab.runtime, lab.publisher.name) == ("lab-broker", "native", "pi-publisher")
    assert [r.name for r in lab.routers] == ["lab-router"] and inventory.hostvars["lab-router"]["impair_peer_ip"]


def _cell(tmp_path: Path, scenario: str, **spec: Any) -> tuple[Any, ...]:
    lab = roles(testbed_broker_runtime="native")
    sc = load_scenario(scenario)
    lay, pki = prepare_run_dir(tmp_path / "run", sc)
    run_spec = RunSpec(scenario=scenario, samples=50, interval_ms=10, inventory="lab.yml", **spec)
    return lab, sc, lay, pki, run_spec


def _device(sc: Any, lay: Any, pki: Any, spec: RunSpec, lab: Any) -> list[str]:
    """The device's command line as measure/multihost.py hands it in."""
    return publisher_args(sc, lay, pki, spec, host=lab.broker_address)


def test_the_clients_get_the_single_host_command_lines_with_the_hosts_paths(tmp_path: Path) -> None:
    lab, sc, lay, pki, spec = _cell(tmp_path, "tls")
    sub = remote.subscriber_command(sc, lay, spec, lab)
    assert sub[:3] == ["/opt/subscriber/bin/python", "-m", "orchestrator.clients.subscriber"]
    assert sub[sub.index("--host") + 1] == "127.0.0.1" and sub[sub.index("--server-name") + 1] == "broker"
    assert sub[sub.index("--ca") + 1] == "/opt/tb/lab/run/pki/ca.crt"
    assert sub[sub.index("--out") + 1] == "/opt/tb/lab/run/logs/subscriber.csv"
    assert not any(a.startswith("/data") for a in sub)
    pub = remote.publisher_command(_device(sc, lay, pki, spec, lab), spec, lab)
    assert pub[0] == "vdevice" and pub[pub.index("--host") + 1] == "10.0.2.10"
    assert pub[pub.index("--server-name") + 1] == "broker"
    assert pub[pub.index("--send-log") + 1] == "/srv/tb/lab/run/logs/publisher.csv"
    assert pub[pub.index("--keylog") + 1] == "/srv/tb/lab/run/keylogs/publisher.keys"
    fleet_spec = spec.model_copy(update={"devices": 20, "payload": 70})
    fleet = remote.publisher_command(_device(sc, lay, pki, fleet_spec, lab), fleet_spec, lab)
    assert fleet[0] == "fleet" and fleet[fleet.index("--out-dir") + 1] == "/srv/tb/lab/run/logs/fleet"


def test_the_native_broker_gets_its_hosts_paths_and_the_tls12_cap(tmp_path: Path) -> None:
    lab, sc, lay, _pki, _spec = _cell(tmp_path, "tls-aes128gcm")  # TLS 1.2 only: an OpenSSL config caps it
    conf = remote.native_broker_conf(sc, lab.broker.lab_dir)
    assert "cafile /opt/tb/lab/priv/pki/ca.crt" in conf and "keyfile /opt/tb/lab/priv/pki/server.key" in conf
    assert "/run/testbed" not in conf
    procs = remote.broker_processes(sc, lay, lab)
    assert procs["broker_start"] == ["--env", "OPENSSL_CONF=/opt/tb/lab/run/config/openssl.cnf", "--",
                                     "mosquitto", "-c", "/opt/tb/lab/run/config/mosquitto.native.conf"]
    assert procs["dumpcap"] == ["dumpcap", "-q", "-f", "tcp port 8883", "-w",
                                "/opt/tb/lab/run/capture/capture.pcapng"]  # -f first: every interface's filter
    tls = remote.broker_processes(load_scenario("tls"), prepare_run_dir(tmp_path / "r2", load_scenario("tls"))[0], lab)
    assert tls["broker_start"][0] == "--"  # no OpenSSL config where TLS 1.3 is allowed and tickets are on


def _members(archive_b64: str) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(archive_b64)), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_each_host_is_sent_what_it_needs_and_no_more(tmp_path: Path) -> None:
    lab, sc, lay, pki, spec = _cell(tmp_path, "tls")
    staged = remote.stage(lay, sc, spec, lab, pki)
    broker, pub = _members(staged["b1"]), _members(staged["p1"])
    assert {"run/pki/server.key", "run/pki/ca.crt", "run/config/mosquitto.conf", "bin/labhost",
            "py/orchestrator/clients/subscriber.py", "run/capture"} <= set(broker)
    assert broker["run/pki/server.key"].mode & 0o077 == 0 and broker["bin/labhost"].mode == 0o755
    assert {"run/pki/ca.crt", "py/orchestrator/clients/clock_probe.py", "clock", "run/logs"} <= set(pub)
    assert not any(n.startswith("run/pki/server") or n.startswith("run/config") for n in pub)
    assert {m.uid for m in pub.values()} == {0}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(staged["p1"])), mode="r:gz") as tar:
        wrapper = tar.extractfile("bin/labhost").read().decode()  # type: ignore[union-attr]
    assert "PYTHONPATH=/srv/tb/lab/py exec python3 -m orchestrator.clients.labhost --dir /srv/tb/lab" in wrapper


def test_cell_vars_are_plain_data_for_the_playbook(tmp_path: Path) -> None:
    lab, sc, lay, pki, spec = _cell(tmp_path, "plain")
    v = remote.cell_vars(sc, lay, pki, spec, lab, {"b1": "", "p1": ""}, tmp_path / "fetched",
                         device_argv=_device(sc, lay, pki, spec, lab))["testbed_lab"]
    assert json.loads(json.dumps(v)) == v
    assert v["roles"] == {"b1": "broker", "p1": "publisher", "r1": "router"}
    assert v["dirs"] == {"b1": "/opt/tb/lab", "p1": "/srv/tb/lab"} and v["runtime"] == "native"
    assert v["fetch"]["p1"] == str(tmp_path / "fetched" / "p1.tgz")
    assert v["stops"]["broker"][:2] == ["--stop", "capture:INT:20"]  # the capture first, with SIGINT
    assert v["publish_timeout_s"] == round(spec.timeout_s())
    assert v["probe"]["p1"][-6:] == ["--host", "10.0.2.10", "--port", "9123", "--count", str(remote.PROBE_COUNT)]
    assert v["compose_env"] == {}
    compose = roles()  # a Docker broker host: compose/testbed.yml's environment, paths of that host
    env = remote.compose_vars(sc, lay, spec, compose)
    assert env["TESTBED_RUN_DIR"] == "/opt/tb/lab/run" and env["TESTBED_BIND"] == "0.0.0.0"
    assert "--host broker" in env["TESTBED_SUBSCRIBER_ARGS"] and "/data/logs/subscriber.csv" in env[
        "TESTBED_SUBSCRIBER_ARGS"]


def _render(template: str, variables: dict[str, Any]) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = lambda v: shlex.quote(str(v))
    return env.from_string((REPO / "playbooks" / "templates" / template).read_text()).render(**variables)


@pytest.mark.parametrize("template", ["lab_broker_native.sh.j2", "lab_facts.sh.j2"])
def test_the_playbooks_shell_scripts_render_to_valid_sh(tmp_path: Path, template: str) -> None:
    lab, sc, lay, pki, spec = _cell(tmp_path, "tls-aes128gcm")
    v = remote.cell_vars(sc, lay, pki, spec, lab, {"b1": "", "p1": ""}, tmp_path,
                         device_argv=_device(sc, lay, pki, spec, lab))
    script = _render(template, {**v, "lab_dir": "/opt/tb/lab", "lh": "/opt/tb/lab/bin/labhost"})
    assert "{{" not in script and "{%" not in script
    proc = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    if template == "lab_broker_native.sh.j2":
        assert "start --name broker --env OPENSSL_CONF=/opt/tb/lab/run/config/openssl.cnf -- mosquitto -c" in script
        assert "-i \"$iface\" -i lo" in script and "subscribed" in script


def test_the_lab_playbook_passes_ansible_syntax_check() -> None:
    tool = REPO / ".venv" / "bin" / "ansible-playbook"
    argv = [str(tool) if tool.exists() else "ansible-playbook", "--syntax-check", "-i",
            str(REPO / "playbooks" / "inventory.lab.example.yml"), str(REPO / "playbooks" / "lab.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_host_problems_name_the_host_and_leave_the_command_line_out() -> None:
    from orchestrator.backends.impairment.driver import PlaybookResult
    from orchestrator.backends.multihost import host_problems

    result = PlaybookResult(playbook="lab.yml", status="failed", rc=4, items=[], unreachable=["p1"], failures=[
        "p1: Run the publisher until it ends | Data could not be sent to remote host",
        "b1: Stop what runs and pack the records | /opt/tb/lab/bin/labhost finish --password s3cret | labhost: "
        "capture (pid 7) survived SIGKILL"])
    assert host_problems(result) == ["host p1 became unreachable",
                                     "b1: Stop what runs and pack the records | labhost: capture (pid 7) survived "
                                     "SIGKILL"]
