"""Lab hosts a test makes: broker, router and publisher machines on this Docker host, reached by Ansible over SSH.

Three containers of testbed-labhost:latest (images/labhost/) on two networks of their own, with the router
BETWEEN the publisher and the broker (docs/multi-host.md):

    testbed-host-pub  --testbed-lab-edge--  testbed-host-router  --testbed-lab-core--  testbed-host-broker

The test host (where pytest runs) reaches every host directly on the Docker bridges, so SSH goes straight to
each; only publisher->broker traffic crosses the router, which forwards it (net.ipv4.ip_forward=1) and alone
holds NET_ADMIN, for the impairment on its own interfaces. The publisher and broker hosts learn the way through
it from a route a throwaway helper container adds in their namespace (NET_ADMIN in the helper only, for one
`ip route` command): the hosts themselves keep Docker's default capabilities, so nothing reached over SSH on
them can change their routes or firewall.

``open_lab(folder, publishers=3)`` adds publisher hosts testbed-host-pub2, testbed-host-pub3 on the edge network
beside the first (roles ``publisher2``, ``publisher3`` in ``Lab.hosts``; each a virtual publisher host of the
inventory): a fleet dealt over several hosts.

``open_lab(folder, publishers=3, faketime={"publisher3": "+0.35 x1.00004"})`` makes that host's wall clock wrong for
every process run there over SSH (libfaketime, tests/integration/fakeclock.py; a test-only knob): ``Lab.clocks``
holds the injected truth per role, checked through an SSH session before the lab is handed over.

``open_lab(folder)`` (a context manager) and the ``lab_hosts`` fixture yield a ``Lab``: the inventory (format of
playbooks/inventory.example.yml), the key, each host's addresses and interfaces, ``ssh``/``pause``/``unpause``.
Teardown always removes the containers, the networks and the folder with the key; ``leftovers()`` lists what
of ours is still there.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import yaml

from orchestrator.signals import sigint_deferred

from .fakeclock import FakeClock, check_session, fake_host_clock

IMAGE = "testbed-labhost:latest"
LABEL = "io.testbed.owned=true"
EDGE, CORE = "testbed-lab-edge", "testbed-lab-core"  # publisher side, broker side
BROKER, ROUTER, PUBLISHER = "testbed-host-broker", "testbed-host-router", "testbed-host-pub"
ROLES = {"broker": BROKER, "router": ROUTER, "publisher": PUBLISHER}


def roles_of(publishers: int = 1) -> dict[str, str]:
    """role -> container: the first publisher host is ``publisher``, the others ``publisher2``, ``publisher3``..."""
    return {**ROLES, **{f"publisher{k}": f"{PUBLISHER}{k}" for k in range(2, publishers + 1)}}
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
# Our own ssh (Lab.ssh) keeps a master connection per host: without keepalives a command on a host that stopped
# answering (paused) waits on it forever. Ansible's keepalives are the product's own (backends/remote_bounds.py):
# the inventory gives none, so the tests check those.
KEEPALIVE = ["-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=4"]
SSH_WAIT_S = 30.0
PAUSE_ATTEMPTS = 10


@contextmanager
def polling(step: Callable[[], None], interval_s: float = 0.05) -> Iterator[None]:
    """``step()`` again and again in a thread of its own until the block ends (what `ps` shows while a cell runs)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            step()
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)


def docker(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode:
        raise RuntimeError(f"docker {' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class LabHost:
    name: str  # container name = inventory host name
    role: str  # broker | router | publisher
    addresses: dict[str, str]  # network name -> IPv4 address
    interfaces: dict[str, str]  # network name -> interface name inside the host

    @property
    def address(self) -> str:
        """Where Ansible reaches it: the broker's core address, the publisher's and router's edge address."""
        return self.addresses[CORE if self.role == "broker" else EDGE]


@dataclass
class Lab:
    folder: Path  # key pair, inventory, Ansible's control sockets; removed at teardown
    inventory: Path
    key: Path
    subnets: dict[str, str]  # network name -> a.b.c.d/len
    hosts: dict[str, LabHost] = field(default_factory=dict)  # role -> host
    clocks: dict[str, FakeClock] = field(default_factory=dict)  # role -> its faked clock (open_lab's ``faketime``)

    def host(self, host: str | LabHost) -> LabHost:
        if isinstance(host, LabHost):
            return host
        if host in self.hosts:  # a key: broker, router, publisher, publisher2, ...
            return self.hosts[host]
        for h in self.hosts.values():
            if host in (h.role, h.name):
                return h
        raise KeyError(host)

    def control_path(self, host: str | LabHost) -> Path:
        """The socket of ``ssh``'s master connection to the host (one handshake for all its commands)."""
        # short: a unix socket's path is at most 107 bytes, and ssh adds 17 while it makes it (CI rehearsal, stop 46:
        # ".../test_a_lab_cell_at_qos1_over_m0/lab/cp/ssh-testbed-host-broker.kxUgcpHr16yokRh7" was too long)
        return self.folder / "cp" / self.host(host).name.removeprefix("testbed-host-")

    def ssh_argv(self, host: str | LabHost, *argv: str) -> list[str]:
        return ["ssh", "-F", "/dev/null", "-i", str(self.key), *SSH_OPTIONS, *KEEPALIVE, "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR", "-o", "ControlMaster=auto",
                "-o", f"ControlPath={self.control_path(host)}", "-o", "ControlPersist=60",
                f"root@{self.host(host).address}", "--", shlex.join(argv)]  # the remote shell splits it again

    def ssh(self, host: str | LabHost, *argv: str, timeout: float = 60,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.ssh_argv(host, *argv), capture_output=True, text=True, timeout=timeout,
                              check=check)

    def pause(self, host: str | LabHost) -> None:
        """Freeze every process of the host (docker pause): unreachable until ``unpause``. Our ``ssh`` master
        to it is closed first, so ``ssh`` then fails within its ConnectTimeout; Ansible's masters are left alone
        (a task in flight sees the host stop answering; the keepalives end the master)."""
        _close_control_masters([self.control_path(host)])
        for _attempt in range(PAUSE_ATTEMPTS):
            proc = docker("pause", self.host(host).name, check=False)
            if proc.returncode == 0 or "unable to freeze" not in proc.stderr:
                break
            time.sleep(0.3)  # the cgroup v1 freezer gives up while processes are busy forking (a host starting)
        if proc.returncode:
            raise RuntimeError(f"docker pause {self.host(host).name}: {proc.stderr.strip()}")

    def unpause(self, host: str | LabHost) -> None:
        docker("unpause", self.host(host).name)


def leftovers() -> list[str]:
    """Containers (testbed-host-*) and networks (testbed-lab-*) of ours still on this Docker host."""
    names = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    nets = docker("network", "ls", "--format", "{{.Name}}").stdout.split()
    return sorted([f"container {n}" for n in names if n.startswith("testbed-host-")]
                  + [f"network {n}" for n in nets if n.startswith("testbed-lab-")])


def remove_ours() -> None:
    """Remove the lab's containers (unpaused first: some Docker releases refuse to remove a paused one) and
    networks: those with our names and our label."""
    mine = ["--filter", f"label={LABEL}", "--format", "{{.Names}}"]
    names = [n for n in docker("ps", "-a", *mine).stdout.split() if n.startswith("testbed-host-")]
    if names:
        docker("unpause", *names, check=False)
        docker("rm", "-f", *names, check=False)
    mine[-1] = "{{.Name}}"
    nets = [n for n in docker("network", "ls", *mine).stdout.split() if n.startswith("testbed-lab-")]
    if nets:
        docker("network", "rm", *nets, check=False)


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Subnets already on this machine: Docker's networks and the host's routes."""
    used: list[ipaddress.IPv4Network] = []
    ids = docker("network", "ls", "-q").stdout.split()
    if ids:
        for net in json.loads(docker("network", "inspect", *ids).stdout):
            for cfg in (net.get("IPAM") or {}).get("Config") or []:
                with suppress(ValueError, KeyError):
                    used.append(ipaddress.IPv4Network(cfg["Subnet"], strict=False))
    routes = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"], capture_output=True, text=True,
                            check=False).stdout
    for m in re.finditer(r"^(?:\S+ )?(\d+\.\d+\.\d+\.\d+/\d+)", routes, flags=re.M):
        used.append(ipaddress.IPv4Network(m.group(1), strict=False))
    return [u for u in used if u.prefixlen > 0]


def pick_subnets() -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
    """Two free /24s: 10.231.1.0/24 and 10.231.2.0/24 unless something here overlaps them."""
    used = _used_networks()
    for k in range(1, 254, 2):
        pair = ipaddress.IPv4Network(f"10.231.{k}.0/24"), ipaddress.IPv4Network(f"10.231.{k + 1}.0/24")
        if not any(p.overlaps(u) for p in pair for u in used):
            return pair
    raise RuntimeError("no two free /24 in 10.231.0.0/16 for the lab networks")


def _keypair(folder: Path) -> Path:
    key = folder / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "testbed-lab", "-f", str(key)],
                   check=True, capture_output=True, timeout=30)
    return key


def _parallel(*jobs: Callable[[], object]) -> None:
    """Run the jobs at once (each a few docker commands); the first failure is raised after all ended."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()


def _start_hosts(pubkey: str, edge: ipaddress.IPv4Network, core: ipaddress.IPv4Network,
                 roles: dict[str, str]) -> dict[str, dict[str, str]]:
    """Networks and containers; returns container -> network -> address."""
    _parallel(*(partial(docker, "network", "create", "--driver", "bridge", "--label", LABEL, "--subnet", str(net),
                        "--gateway", str(net[1]), name) for name, net in ((EDGE, edge), (CORE, core))))
    addresses = {ROUTER: {EDGE: str(edge[2]), CORE: str(core[2])}, BROKER: {CORE: str(core[10])},
                 **{name: {EDGE: str(edge[10 + k])} for k, name in enumerate(publisher_names(roles))}}
    common = ["--label", LABEL, "-e", f"TESTBED_AUTHORIZED_KEY={pubkey}"]

    def router() -> None:
        docker("create", "--name", ROUTER, "--hostname", "router", *common, "--cap-add", "NET_ADMIN",
               "--sysctl", "net.ipv4.ip_forward=1", "--network", EDGE, "--ip", addresses[ROUTER][EDGE], IMAGE)
        docker("network", "connect", "--ip", addresses[ROUTER][CORE], CORE, ROUTER)
        docker("start", ROUTER)

    def end_host(name: str, net: str, hostname: str) -> None:
        docker("run", "-d", "--name", name, "--hostname", hostname, *common, "--network", net,
               "--ip", addresses[name][net], IMAGE)

    _parallel(router, partial(end_host, BROKER, CORE, "broker"),
              *(partial(end_host, name, EDGE, name.removeprefix("testbed-host-")) for name in publisher_names(roles)))
    return addresses


def publisher_names(roles: dict[str, str]) -> list[str]:
    return [name for role, name in roles.items() if role.startswith("publisher")]


def _route_via_router(addresses: dict[str, dict[str, str]], edge: ipaddress.IPv4Network,
                      core: ipaddress.IPv4Network, roles: dict[str, str]) -> None:
    """The publisher reaches core through the router's edge address, the broker reaches edge through its core
    address: `ip route` in a helper sharing the host's namespace, with NET_ADMIN only, removed at once."""
    routes = (*((name, core, addresses[ROUTER][EDGE]) for name in publisher_names(roles)),
              (BROKER, edge, addresses[ROUTER][CORE]))
    procs = [subprocess.Popen(["docker", "run", "--rm", "--label", LABEL, "--network", f"container:{name}",
                               "--cap-drop", "ALL", "--cap-add", "NET_ADMIN", "--entrypoint", "ip", IMAGE,
                               "route", "replace", str(net), "via", via],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, net, via in routes]
    for proc, (name, _net, _via) in zip(procs, routes, strict=True):
        _out, err = proc.communicate(timeout=60)
        if proc.returncode:
            raise RuntimeError(f"route on {name} failed: {err.strip()}")


def interfaces_of(container: str, addresses: dict[str, str]) -> dict[str, str]:
    """network -> interface name inside the container, matched by address (`ip -o addr`)."""
    text = docker("exec", container, "ip", "-o", "-4", "addr", "show").stdout
    by_ip = {m.group(2): m.group(1).split("@")[0] for m in re.finditer(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/", text,
                                                                        flags=re.M)}
    return {net: by_ip[ip] for net, ip in addresses.items()}


def _wait_for_ssh(lab: Lab) -> None:
    deadline = time.monotonic() + SSH_WAIT_S
    waiting = list(lab.hosts.values())
    while waiting:
        procs = [(h, subprocess.Popen(lab.ssh_argv(h, "true"), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)) for h in waiting]
        said = {h.name: p.communicate(timeout=30)[1].strip() for h, p in procs}
        waiting = [h for h, p in procs if p.returncode != 0]
        if waiting and time.monotonic() > deadline:
            logs = {h.name: docker("logs", "--tail", "5", h.name, check=False).stderr.strip() for h in waiting}
            raise RuntimeError(f"sshd did not answer within {SSH_WAIT_S:g} s on {[h.name for h in waiting]}: "
                               f"ssh said {[said[h.name] for h in waiting]}; logs {logs}")
        if waiting:
            time.sleep(0.2)


def write_inventory(lab: Lab) -> None:
    """groups broker, router, publisher as in playbooks/inventory.example.yml; Ansible's SSH control sockets in
    the lab's folder (a later lab on the same addresses never reuses a master connection to a removed host)."""
    b, r = lab.hosts["broker"], lab.hosts["router"]
    pubs = [h for role, h in lab.hosts.items() if role.startswith("publisher")]
    remote_dir = "/opt/testbed"

    def conn(h: LabHost) -> dict[str, str]:
        return {"ansible_host": h.address}

    inventory = {"all": {
        "vars": {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(lab.key),
            "ansible_ssh_common_args": " ".join(SSH_OPTIONS),
            "ansible_pipelining": True,
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_control_path_dir": str(lab.folder / "cp"),
        },
        "children": {
            # no Docker on the hosts: the broker, capture and subscriber run as processes there
            "broker": {"hosts": {b.name: {**conn(b), "testbed_remote_dir": remote_dir,
                                          "testbed_broker_runtime": "native"}}},
            "router": {"hosts": {r.name: {**conn(r), "impair_ingress_interface": r.interfaces[EDGE],
                                          "impair_egress_interface": r.interfaces[CORE],
                                          "impair_peer_ip": b.addresses[CORE]}}},
            "publisher": {"hosts": {p.name: {**conn(p), "publisher_kind": "virtual",
                                             "publisher_ip": p.addresses[EDGE], "testbed_remote_dir": remote_dir}
                                    for p in pubs}},
        },
    }}
    lab.inventory.write_text("# made by tests/integration/labhosts.py; removed with the lab\n"
                             + yaml.safe_dump(inventory, sort_keys=False))


def _own_fleet(names: list[str]) -> None:
    """TESTBED_LAB_FLEET=PATH: that fleet program instead of the image's on every publisher host (one built from a
    change to the fleet, tried before the images are rebuilt; the same Debian 12 and mbedTLS 2.28 as the image)."""
    path = os.environ.get("TESTBED_LAB_FLEET")
    if path:
        for name in names:
            docker("cp", path, f"{name}:/usr/local/bin/fleet")


def _close_control_masters(sockets: Iterable[Path]) -> None:
    """End ssh master connections (ControlPersist: Ansible's, ours) so no ssh process outlives the lab."""
    for sock in sockets:
        subprocess.run(["ssh", "-F", "/dev/null", "-o", f"ControlPath={sock}", "-O", "exit", "lab"],
                       capture_output=True, timeout=10, check=False)


@contextmanager
def open_lab(workdir: Path, publishers: int = 1, faketime: dict[str, str] | None = None) -> Iterator[Lab]:
    """Make the hosts (``publishers`` publisher hosts; ``faketime``: role -> a FAKETIME spec its wall clock gets,
    tests/integration/fakeclock.py), yield the Lab, ALWAYS remove everything (also on failure or Ctrl-C)."""
    if docker("image", "inspect", IMAGE, check=False).returncode:
        raise RuntimeError(f"image {IMAGE} not built (`testbed images build`)")
    folder = workdir / "lab"
    folder.mkdir(mode=0o700, parents=True)  # raises when it exists: we remove only what we made
    try:
        remove_ours()  # a previous run killed before its teardown
        key = _keypair(folder)
        edge, core = pick_subnets()
        roles = roles_of(publishers)
        addresses = _start_hosts(key.with_suffix(".pub").read_text().strip(), edge, core, roles)
        _route_via_router(addresses, edge, core, roles)
        _own_fleet(publisher_names(roles))
        lab = Lab(folder=folder, inventory=folder / "inventory.yml", key=key,
                  subnets={EDGE: str(edge), CORE: str(core)})
        for role, spec in (faketime or {}).items():  # before any SSH connection (fakeclock.py)
            lab.clocks[role] = fake_host_clock(roles[role], spec, folder)
        with ThreadPoolExecutor(max_workers=len(roles)) as pool:
            found = {name: pool.submit(interfaces_of, name, addresses[name]) for name in roles.values()}
            lab.hosts.update({role: LabHost(name=name, role=role.rstrip("0123456789"), addresses=addresses[name],
                                            interfaces=found[name].result()) for role, name in roles.items()})
        (folder / "cp").mkdir(mode=0o700)
        write_inventory(lab)
        _wait_for_ssh(lab)
        for role, fake in lab.clocks.items():
            check_session(lab.ssh, role, fake)
        yield lab
    finally:
        with sigint_deferred():
            _close_control_masters((folder / "cp").glob("*"))
            remove_ours()
            shutil.rmtree(folder, ignore_errors=True)


def require_image(config: pytest.Config) -> None:
    """Skip without testbed-labhost:latest, or fail under --require-docker (as tests/conftest.py does for the
    other images); `make test` builds it first (`testbed images build`)."""
    if docker("image", "inspect", IMAGE, check=False).returncode:
        why = f"image {IMAGE} not built (`testbed images build`)"
        if config.getoption("--require-docker"):
            pytest.fail(why + " (--require-docker is set)")
        pytest.skip(why)


@pytest.fixture
def lab_hosts(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """The lab for one test (`open_lab`)."""
    require_image(request.config)
    with open_lab(tmp_path) as lab:
        yield lab
