"""One cell on the lab's hosts: what each host is sent and the extra vars of playbooks/lab.yml.

The run folder is prepared here as for one host (lab/topology.py: broker config, PKI, openssl.cnf) and the
clients get the same command lines (lab/topology.py subscriber_args; the device's, publishers/virtual.py
publisher_args, is handed in by measure/multihost.py); only hosts and paths change: the container paths
/data/... become the host's ``<lab folder>/run/...``, the subscriber (beside the broker) connects to 127.0.0.1,
the publisher to the broker host's address, and the TLS server name stays `broker` (the certificate's name).
Each host gets one archive: our client modules (standard library; the subscriber also needs paho-mqtt in
``testbed_subscriber_python``), bin/labhost and the part of the run folder its role needs (lab/credentials.py:
no CA key anywhere, the publisher's password only on the publisher host, in the 0600 file the device reads
with --password-file; secrets 0600, pki/ 0700).
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator import paths
from orchestrator.backends.compose import TIME_ECHO_PORT, Topology, compose_env
from orchestrator.backends.multihost import LabHost, LabRoles
from orchestrator.errors import TestbedError
from orchestrator.lab import credentials
from orchestrator.lab.brokerconf import CONTAINER_PASSWORDS, CONTAINER_PKI, render_mosquitto_conf
from orchestrator.lab.pki import Pki
from orchestrator.lab.topology import subscriber_args
from orchestrator.model import shares
from orchestrator.model.axes import MAX_DEVICES_PER_HOST
from orchestrator.model.layout import DATA, Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario

PROBE_COUNT = 16  # clock exchanges before and after a cell (the board's DEFAULT_SYNC_COUNT is of this order)
# a fleet over several hosts: its start this long after the broker host's last clock stamp. 6 s was too short on the
# shared 2-core host at a load of 5 to 7: every host's fleet got its start 0.6 to 4.2 s past (the fault suite's
# lab-fleet-host-lost, 4 cells of 4), as the publish play took up to 10.2 s to reach them
START_LEAD_S = 12.0
COUNT_WAIT_S = 15.0  # after the publisher ended: the last messages (TCP retransmissions) reach the subscriber
CLIENT_MODULES = ("labhost", "clock_probe", "time_echo", "subscriber", "payload", "capacity")
COLLECT = {"broker": ["run/capture", "run/logs", "run/keylogs", "procs"],
           "publisher": ["run/logs", "run/keylogs", "procs", "clock"]}
# in this order, NAME:SIGNAL:TIMEOUT: the capture first, with SIGINT (dumpcap writes the end of the pcapng)
STOPS = {"broker": ["capture:INT:20", "subscriber:TERM:10", "timeecho:TERM:5", "broker:TERM:10"],
         "publisher": ["publisher:TERM:5"]}
DEFAULTS = {"testbed_python": "python3", "testbed_subscriber_python": "/opt/subscriber/bin/python",
            "testbed_vdevice": "vdevice", "testbed_fleet": "fleet", "testbed_dumpcap": "dumpcap",
            "testbed_mosquitto": "mosquitto"}


def host_var(roles: LabRoles, host: LabHost, key: str) -> str:
    return str(roles.hostvars.get(host.name, {}).get(key) or DEFAULTS[key])


def on_host(args: list[str], run_dir: str) -> list[str]:
    """The container paths (/data/...) of a command line as paths of the host's run folder."""
    prefix = DATA + "/"
    return [f"{run_dir}/{a[len(prefix):]}" if a.startswith(prefix) else a for a in args]


def with_host(args: list[str], host: str) -> list[str]:
    """``--host X`` of a command line set to ``host``."""
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a == "--host":
            out[i + 1] = host
    return out


def native_broker_conf(scenario: Scenario, lab_dir: str) -> str:
    """mosquitto.conf with the broker host's own paths: the PKI and password copies the playbook makes
    under the lab folder (what images/broker/entrypoint.sh makes under /run/testbed in the container)."""
    return (render_mosquitto_conf(scenario).replace(CONTAINER_PKI, f"{lab_dir}/priv/pki")
            .replace(CONTAINER_PASSWORDS, f"{lab_dir}/priv/passwords"))


def subscriber_command(scenario: Scenario, lay: Layout, spec: RunSpec, roles: LabRoles) -> list[str]:
    """The subscriber on the broker host, as the container runs it, connecting to the broker beside it."""
    args = with_host(subscriber_args(scenario, lay, spec.subscription), "127.0.0.1")
    python = host_var(roles, roles.broker, "testbed_subscriber_python")
    return [python, "-m", "orchestrator.clients.subscriber", *on_host(args, f"{roles.broker.lab_dir}/run")]


def publisher_command(device_argv: list[str], spec: RunSpec, roles: LabRoles) -> list[str]:
    """vdevice (or the fleet) on the first publisher host: ``device_argv`` (publishers/virtual.py publisher_args
    with ``host`` = the broker host's address) with the host's program (``testbed_<argv[0]>``) and paths."""
    return publisher_commands(device_argv, roles)[roles.publisher.name]


def publisher_commands(device_argv: list[str], roles: LabRoles, dealt: bool = False) -> dict[str, list[str]]:
    """Each publisher host's command line: its program and paths; ``dealt`` (a fleet) over several hosts, each
    runs its share, ``--share-weights W0,W1,.. --share-index k`` (orchestrator/model/shares.py deals the same
    devices)."""
    out = {}
    for k, host in enumerate(roles.publishers):
        program = host_var(roles, host, f"testbed_{device_argv[0]}")
        argv = on_host([program, *device_argv[1:]], f"{host.lab_dir}/run")
        if dealt and len(roles.publishers) > 1:
            argv += ["--share-weights", ",".join(str(w) for w in roles.weights), "--share-index", str(k)]
        out[host.name] = argv
    return out


def broker_processes(scenario: Scenario, lay: Layout, roles: LabRoles) -> dict[str, Any]:
    """The native broker host's command lines: mosquitto (its OpenSSL config for TLS-1.2-only scenarios), dumpcap
    (the playbook adds the interfaces) and the files to wait for."""
    b = roles.broker
    run = f"{b.lab_dir}/run"
    env = ["--env", f"OPENSSL_CONF={run}/config/openssl.cnf"] if (lay.config / "openssl.cnf").exists() else []
    capture = on_host([lay.in_container(lay.capture)], run)[0]
    return {
        "broker_start": [*env, "--", host_var(roles, b, "testbed_mosquitto"), "-c",
                         on_host([lay.in_container(lay.native_broker_conf)], run)[0]],
        # -f before the first -i: the filter of every interface
        "dumpcap": [host_var(roles, b, "testbed_dumpcap"), "-q", "-f", f"tcp port {scenario.port}", "-w", capture],
        "capture_file": capture,
        "subscriber_status": on_host([lay.in_container(lay.subscriber_status)], run)[0],
        "subscriber_log": on_host([lay.in_container(lay.subscriber_log)], run)[0],
    }


def compose_vars(scenario: Scenario, lay: Layout, spec: RunSpec, roles: LabRoles) -> dict[str, str]:
    """compose/testbed.yml's environment on a Docker broker host (testbed_broker_runtime: compose)."""
    if roles.runtime != "compose":
        return {}
    topo = Topology(run_dir=Path(f"{roles.broker.lab_dir}/run"), port=scenario.port, host_port=scenario.port,
                    bind="0.0.0.0", subscriber_args=subscriber_args(scenario, lay, spec.subscription))
    return compose_env(topo)


def _wrapper(python: str, lab_dir: str) -> str:
    return ("#!/bin/sh\n# made by testbed (orchestrator/lab/remote.py): our modules from this lab folder\n"
            f"PYTHONPATH={shlex.quote(lab_dir)}/py exec {shlex.quote(python)} -m orchestrator.clients.labhost "
            f"--dir {shlex.quote(lab_dir)} \"$@\"\n")


def sent_mode(name: str, directory: bool = False) -> int | None:
    """The mode a file or folder of pki/ lands with on a host: its owner's only (certificates 0644); None: not
    of pki/."""
    if "pki" not in name.split("/"):
        return None
    return 0o700 if directory else 0o644 if name.endswith(".crt") else 0o600


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, mode: int = 0o644,
         source: Path | None = None) -> None:
    info = tarfile.TarInfo(name)
    if source is not None:
        info = tar.gettarinfo(str(source), arcname=name)
        data = source.read_bytes() if source.is_file() else None
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, sent_mode(name, directory=True) or 0o755
        tar.addfile(info)
        return
    if source is None:
        info.mode = mode
    info.mode = sent_mode(name) or info.mode
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def stage_archive(host: LabHost, roles: LabRoles, run_files: list[tuple[str, Path]], folders: list[str],
                  made: dict[str, bytes] | None = None) -> str:
    """The archive a host is sent (base64, it goes as the stdin of one task that is not logged): py/ (our client
    modules), bin/labhost, run/ files (``made``: name -> content made for this host) and empty folders."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for folder in ("py", "py/orchestrator", "py/orchestrator/clients", "bin", "procs", *folders):
            _add(tar, folder)
        _add(tar, "py/orchestrator/__init__.py", source=paths.source("orchestrator/__init__.py"))
        _add(tar, "py/orchestrator/clients/__init__.py", source=paths.source("orchestrator/clients/__init__.py"))
        for module in CLIENT_MODULES:
            _add(tar, f"py/orchestrator/clients/{module}.py", source=paths.source(f"orchestrator/clients/{module}.py"))
        _add(tar, "bin/labhost", _wrapper(host_var(roles, host, "testbed_python"), host.lab_dir).encode(), 0o755)
        for name, path in run_files:
            _add(tar, name, source=path)
        for name, content in (made or {}).items():
            _add(tar, name, content)
    return base64.b64encode(data.getvalue()).decode("ascii")


def role_files(role: str, lay: Layout, scenario: Scenario) -> list[tuple[str, Path]]:
    """(name in the archive, local file) of the run folder that a host of ``role`` gets as they are: the broker
    host the rendered configuration; of pki/ what lab/credentials.py gives the role."""
    config = [p for p in sorted(lay.config.rglob("*")) if p.is_file()] if role == "broker" else []
    files = [*config, *(lay.root / rel for rel in credentials.copied_files(role, scenario))]
    return [(f"run/{p.relative_to(lay.root).as_posix()}", p) for p in files]


def role_made(role: str, scenario: Scenario, pki: Pki | None) -> dict[str, bytes]:
    return {f"run/{rel}": data for rel, data in credentials.made_files(role, scenario, pki).items()}


def stage(lay: Layout, scenario: Scenario, spec: RunSpec, roles: LabRoles, pki: Pki | None,
          device_folders: Sequence[Path] = ()) -> dict[str, str]:
    """host -> the archive it is sent (``device_folders``: where in the run folder the publisher variant's program
    writes beyond logs/, made on the publisher host; a fleet's logs/fleet)."""
    broker_files = role_files("broker", lay, scenario)
    if roles.runtime == "compose":
        root = paths.tree()
        broker_files += [(p.relative_to(root).as_posix(), p) for sub in ("compose", "images")
                         for p in sorted((root / sub).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    run_folders = ["run", "run/logs", "run/keylogs"]
    pub_folders = [*run_folders, "run/pki", "clock", *(f"run/{p.relative_to(lay.root).as_posix()}"
                                                       for p in device_folders)]
    b = roles.broker
    return {b.name: stage_archive(b, roles, broker_files, [*run_folders, "run/config", "run/pki", "run/capture"],
                                  role_made("broker", scenario, pki)),
            **{p.name: stage_archive(p, roles, role_files("publisher", lay, scenario), pub_folders,
                                     role_made("publisher", scenario, pki)) for p in roles.publishers}}


def host_devices(spec: RunSpec, roles: LabRoles, dealt: bool) -> dict[str, int]:
    """Each publisher host's devices in this cell (orchestrator/model/shares.py; one device: the first host's)."""
    sizes = shares.share_sizes(spec.devices, roles.weights) if dealt else [1]
    found = {h.name: n for h, n in zip(roles.publishers, sizes, strict=False)}
    over = [f"{host} {n}" for host, n in found.items() if n > MAX_DEVICES_PER_HOST]
    if over:  # the fleet refuses such a share too, but on its host, once the cell's broker runs
        raise TestbedError(f"--devices {spec.devices}: a share above the per-host limit of {MAX_DEVICES_PER_HOST} "
                           f"devices ({', '.join(over)})",
                           hint="add publisher hosts to the inventory or change their publisher_weight")
    return found


def cell_vars(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, roles: LabRoles,
              staged: dict[str, str], fetched: Path, *, device_argv: list[str],
              dealt: bool = False) -> dict[str, Any]:
    """playbooks/lab.yml's ``testbed_lab`` for one cell (``fetched``: where the hosts' archives come back;
    ``device_argv``: publishers/virtual.py publisher_args for the broker host's address; ``dealt``: the variant's
    devices are dealt over the publisher hosts, a fleet)."""
    b, p = roles.broker, roles.publisher
    hv = roles.hostvars.get(b.name, {})
    probe_python = {h.name: host_var(roles, h, "testbed_python") for h in roles.publishers}
    return {"testbed_lab": {
        "every_host": [h.name for h in roles.every_host], "roles": {h.name: h.role for h in roles.every_host},
        "broker": b.name, "publisher": p.name, "publishers": [h.name for h in roles.publishers],
        "runtime": roles.runtime,
        "dirs": {h.name: h.lab_dir for h in roles.contacted},
        "remote_dirs": {h.name: h.remote_dir for h in roles.contacted},
        "archives": staged, "fetch": {h.name: str(fetched / f"{h.name}.tgz") for h in roles.contacted},
        "collect": COLLECT, "stops": {role: [a for s in stops for a in ("--stop", s)] for role, stops in STOPS.items()},
        "port": scenario.port, "broker_address": roles.broker_address,
        "capture_interface": str(hv.get("testbed_capture_interface") or ""),
        **broker_processes(scenario, lay, roles),
        "subscriber": subscriber_command(scenario, lay, spec, roles),
        "time_echo": [host_var(roles, b, "testbed_python"), "-m", "orchestrator.clients.time_echo",
                      "--port", str(TIME_ECHO_PORT)],
        "time_echo_port": TIME_ECHO_PORT,
        "compose_env": compose_vars(scenario, lay, spec, roles),
        "publisher_argv": publisher_commands(device_argv, roles, dealt),
        "publish_timeout_s": round(spec.timeout_s() + (START_LEAD_S if len(roles.publishers) > 1 else 0)),
        "probe": {h: [python, "-m", "orchestrator.clients.clock_probe", "--host", roles.broker_address,
                      "--port", str(TIME_ECHO_PORT), "--count", str(PROBE_COUNT)]
                  for h, python in probe_python.items()},
        "capacity": {h: [probe_python[h], "-m", "orchestrator.clients.capacity", "--host", h, "--devices", str(n),
                         "--transport", scenario.transport] for h, n in host_devices(spec, roles, dealt).items()},
        "count_expected": 0, "count_timeout_s": COUNT_WAIT_S, "probe_post": False,
    }}
