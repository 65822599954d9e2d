"""Real impairments in network namespaces this test makes, applied by ansible-runner (local connection).

Topology (like the Docker host: ``wire`` plays the host namespace with the containers' veth peers):

    pub [10.99.1.1 pub_if] <-veth-> [wire_pub_if] wire [wire_brk_if] <-veth-> [brk_if 10.99.2.2] brk

Egress target = ``pub_if`` inside ``pub`` (tc); ingress target = ``wire_pub_if`` inside ``wire`` (nft),
exactly where a container's veth peer sits. The capture runs in ``brk``, like the broker's sidecar.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scipy.stats import binom

from orchestrator.backends import impairment as b
from orchestrator.backends.impairment import Hook, ImpairmentTarget
from orchestrator.backends.impairment.argv import apply_argvs
from orchestrator.backends.impairment.driver import run_playbook
from orchestrator.backends.impairment.plan import build_plan
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Impairment, load_impairment
from tests.skips import kernel_has_netem, tools_gate

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[2]
PORT = 5001
_counter = itertools.count()


def _problem() -> str | None:
    for tool in ("ip", "tc", "nft", "nsenter", "unshare", "dumpcap", "tshark"):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install iproute2 nftables util-linux tshark)"
    return None


_tools = tools_gate(_problem)  # before the module's other fixtures: skip, or fail under CI=true


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=check)


@dataclass
class Lab:
    tag: str
    pub_ip: str = "10.99.1.1"
    brk_ip: str = "10.99.2.2"

    @property
    def pub(self) -> str:
        return f"{self.tag}-pub"

    @property
    def wire(self) -> str:
        return f"{self.tag}-wire"

    @property
    def brk(self) -> str:
        return f"{self.tag}-brk"

    @property
    def pub_if(self) -> str:
        return f"{self.tag}p"

    @property
    def wire_pub_if(self) -> str:
        return f"{self.tag}wp"

    @property
    def wire_brk_if(self) -> str:
        return f"{self.tag}wb"

    @property
    def brk_if(self) -> str:
        return f"{self.tag}b"

    @staticmethod
    def path(ns: str) -> str:
        return f"/run/netns/{ns}"

    def inside(self, ns: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]

    def targets(self) -> list[ImpairmentTarget]:
        egress = ImpairmentTarget(label="publisher", netns_path=self.path(self.pub), interface=self.pub_if)
        ingress = ImpairmentTarget(label="publisher", netns_path=self.path(self.wire),
                                   interface=self.wire_pub_if, hook=Hook.INGRESS)
        return [egress, ingress]

    def leftovers(self) -> list[str]:
        """Our qdiscs or nft tables still present anywhere in the lab, read with tc/nft directly."""
        found = []
        for ns, ifaces in ((self.pub, [self.pub_if]), (self.wire, [self.wire_pub_if, self.wire_brk_if])):
            for iface in ifaces:
                out = sh(*self.inside(ns, "tc", "qdisc", "show", "dev", iface)).stdout
                found += [f"{ns}/{iface}: {line}" for line in out.splitlines() if " 7e5" in line]
            tables = sh(*self.inside(ns, "nft", "list", "tables")).stdout
            found += [f"{ns}: {line}" for line in tables.splitlines() if "testbed_impair" in line]
        return found


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = Lab(tag=f"ti{os.getpid() % 10000}{next(_counter)}")
    steps = [
        *[("netns", "add", ns) for ns in (lab.pub, lab.wire, lab.brk)],
        ("link", "add", lab.pub_if, "type", "veth", "peer", "name", lab.wire_pub_if),
        ("link", "add", lab.brk_if, "type", "veth", "peer", "name", lab.wire_brk_if),
        ("link", "set", lab.pub_if, "netns", lab.pub),
        ("link", "set", lab.wire_pub_if, "netns", lab.wire),
        ("link", "set", lab.wire_brk_if, "netns", lab.wire),
        ("link", "set", lab.brk_if, "netns", lab.brk),
        ("-n", lab.pub, "addr", "add", f"{lab.pub_ip}/24", "dev", lab.pub_if),
        ("-n", lab.wire, "addr", "add", "10.99.1.254/24", "dev", lab.wire_pub_if),
        ("-n", lab.wire, "addr", "add", "10.99.2.254/24", "dev", lab.wire_brk_if),
        ("-n", lab.brk, "addr", "add", f"{lab.brk_ip}/24", "dev", lab.brk_if),
        *[("-n", ns, "link", "set", dev, "up") for ns, dev in
          ((lab.pub, lab.pub_if), (lab.wire, lab.wire_pub_if), (lab.wire, lab.wire_brk_if),
           (lab.brk, lab.brk_if), (lab.pub, "lo"), (lab.brk, "lo"))],
        ("-n", lab.pub, "route", "add", "default", "via", "10.99.1.254"),
        ("-n", lab.brk, "route", "add", "default", "via", "10.99.2.254"),
    ]
    try:
        for step in steps:
            sh("ip", *step)
        sh(*lab.inside(lab.wire, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        for ns in (lab.pub, lab.wire, lab.brk):  # no IPv6 chatter: only the test's packets cross the rules
            sh(*lab.inside(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"))
        yield lab
    finally:
        for ns in (lab.pub, lab.wire, lab.brk):
            sh("ip", "netns", "del", ns, check=False)


RECEIVER = textwrap.dedent("""
    import socket, sys
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(1)
    print("listening", flush=True)
    conn, _ = srv.accept(); total = 0
    while True:
        data = conn.recv(65536)
        if not data:
            break
        total += len(data)
    conn.sendall(b"ok"); conn.close(); print(total, flush=True)
""")

SENDER = textwrap.dedent("""
    import socket, sys, time
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = socket.create_connection((host, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode == "paced":   # COUNT small writes, INTERVAL seconds apart: one segment each
        count, size, interval = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
        for _ in range(count):
            s.sendall(b"m" * size); time.sleep(interval)
    else:                 # bulk for SECONDS
        end = time.monotonic() + float(sys.argv[4]); chunk = b"b" * 1400
        while time.monotonic() < end:
            s.sendall(chunk)
    s.shutdown(socket.SHUT_WR); s.recv(2); s.close()
""")


@dataclass
class Flow:
    received_bytes: int
    pcap: Path


def send_and_capture(lab: Lab, tmp_path: Path, *sender_args: str) -> Flow:
    (tmp_path / "recv.py").write_text(RECEIVER)
    (tmp_path / "send.py").write_text(SENDER)
    pcap = tmp_path / "brk.pcapng"
    cap = subprocess.Popen(lab.inside(lab.brk, "dumpcap", "-q", "-i", lab.brk_if, "-f", f"tcp port {PORT}",
                                      "-w", str(pcap)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    recv_argv = lab.inside(lab.brk, sys.executable, str(tmp_path / "recv.py"), lab.brk_ip, str(PORT))
    recv = subprocess.Popen(recv_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert cap.stderr is not None and recv.stdout is not None
        for line in cap.stderr:  # dumpcap says so once the capture is running
            if "Capturing on" in line:
                break
        assert recv.stdout.readline().strip() == "listening"
        send = tmp_path / "send.py"
        sh(*lab.inside(lab.pub, sys.executable, str(send), lab.brk_ip, str(PORT), *sender_args))
        out, err = recv.communicate(timeout=60)
        time.sleep(0.3)
    finally:
        cap.send_signal(signal.SIGINT)
        cap.wait(timeout=30)
        recv.kill()
    assert recv.returncode == 0, err
    return Flow(received_bytes=int(out.split()[-1]), pcap=pcap)


def data_segments(flow: Flow, src: str) -> list[tuple[float, int, int, int, bool]]:
    """(time, frame length, relative seq, payload length, tshark calls it a retransmission/out-of-order)."""
    out = sh("tshark", "-r", str(flow.pcap), "-Y", f"ip.src=={src} && tcp", "-T", "fields",
             "-e", "frame.time_epoch", "-e", "frame.len", "-e", "tcp.seq", "-e", "tcp.len",
             "-e", "tcp.analysis.retransmission", "-e", "tcp.analysis.fast_retransmission",
             "-e", "tcp.analysis.out_of_order", "-E", "separator=,").stdout
    rows = []
    for line in out.splitlines():
        t, flen, seq, plen, *flags = line.split(",")
        rows.append((float(t), int(flen), int(seq), int(plen), any(flags)))
    return rows


def test_lossy_5pct_retransmission_rate_is_binomial_around_5_percent(lab: Lab, tmp_path: Path) -> None:
    imp = load_impairment("lossy-5pct")
    with b.impaired(imp, lab.targets()) as record:
        assert "numgen random mod 100 < 5 counter" in record.after
        flow = send_and_capture(lab, tmp_path, "paced", "3600", "60", "0.001")
        counters = b.show(lab.targets())
    assert flow.received_bytes == 3600 * 60  # TCP repairs every loss: application-level loss stays 0

    packets = data_segments(flow, lab.pub_ip)
    segments = [s for s in packets if s[3] > 0]
    highest, new, resent, flagged = 0, 0, 0, 0
    disagree = []  # (index, seq, length, ours, tshark's) where tshark's TCP analysis reads a segment otherwise
    for i, (_, _, seq, plen, tshark_flag) in enumerate(segments):
        ours = seq < highest  # carries bytes already seen: resent because its first transmission was lost
        resent, new = resent + ours, new + (not ours)
        highest = max(highest, seq + plen)
        flagged += tshark_flag
        if ours != tshark_flag:
            disagree.append((i, seq, plen, ours, tshark_flag))
    unique = new + resent  # every segment's first transmission faced the 5 % drop once
    # 99.9 %: a busy machine coalesces a lost segment's resend with the next one now and then (seen once:
    # 135 resends of 3,410 on a loaded CI rehearsal, against a 99 % low of 139); the kernel's own drop
    # counter below keeps the 99 % interval
    low, high = binom.interval(0.999, unique, 0.05)
    print(f"data segments captured {len(segments)}: unique {unique}, retransmitted {resent} "
          f"({100 * resent / unique:.2f} %), tshark-flagged {flagged}; 99.9 % interval [{low:.0f}, {high:.0f}]")
    # writes coalesce when the machine is busy (1,377..2,864 seen); the interval uses the real count
    assert unique >= 800
    assert low <= resent <= high
    # an independent reader (tshark's TCP analysis) agrees, segment by segment, but for the odd one its own
    # heuristics read otherwise (one CI rehearsal: 135 flagged for 134 resends, under load)
    print(f"segments read otherwise by tshark: {disagree[:10]}")
    assert len(disagree) <= max(2, resent // 50), disagree[:20]

    # The kernel's own count: every publisher packet met the rule once; those captured passed it.
    dropped = int(re.search(r"numgen random mod 100 < 5 counter packets (\d+)", counters).group(1))
    total = dropped + len(packets)
    low, high = binom.interval(0.99, total, 0.05)
    print(f"nft: {dropped} of {total} packets dropped ({100 * dropped / total:.2f} %)")
    assert low <= dropped <= high
    assert dropped >= resent


def test_narrowband_250kbit_never_exceeds_the_rate_by_10_percent(lab: Lab, tmp_path: Path) -> None:
    imp = load_impairment("narrowband-250kbit")
    with b.impaired(imp, lab.targets()) as record:
        assert "qdisc tbf 7e57: root" in record.after and "rate 250Kbit" in record.after
        flow = send_and_capture(lab, tmp_path, "bulk", "4.5")
    frames = data_segments(flow, lab.pub_ip)
    t0 = frames[0][0]
    windows: dict[int, int] = {}
    for t, flen, *_ in frames:
        windows[int(t - t0)] = windows.get(int(t - t0), 0) + flen * 8
    full = [bits for second, bits in sorted(windows.items()) if second < 4]  # whole 1 s windows only
    print("kbit/s per 1 s window:", [round(bits / 1000, 1) for bits in full])
    assert len(full) == 4
    assert max(full) <= 250_000 * 1.10
    assert min(full) >= 250_000 * 0.80  # the link was saturated, so the bound is not vacuous


# this host's kernel, which the namespaces use (unshare + tc, no helper container: these tests start none)
@pytest.mark.skipif(kernel_has_netem() is False, reason="kernel lacks sch_netem")
def test_netem_delay_is_applied_where_the_kernel_has_it(lab: Lab, tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import socket, statistics, time
        samples = []
        for _ in range(15):
            t = time.perf_counter()
            try:
                socket.create_connection(("{lab.brk_ip}", 9), timeout=5).close()
            except ConnectionRefusedError:
                pass  # the RST comes back after the SYN went through netem: one delay
            samples.append((time.perf_counter() - t) * 1000)
        print(statistics.median(samples))
    """)
    imp = Impairment(name="delay-20", delay_ms=20)
    with b.impaired(imp, lab.targets()) as record:
        assert "netem" in record.after
        median_ms = float(sh(*lab.inside(lab.pub, sys.executable, "-c", code)).stdout)
    assert 19 <= median_ms <= 40
    assert lab.leftovers() == []


@pytest.mark.skipif(kernel_has_netem() is True, reason="kernel has sch_netem")
def test_delay_profile_without_netem_fails_before_anything_is_applied(lab: Lab) -> None:
    imp = load_impairment("wifi-good")
    before = b.show(lab.targets())
    with pytest.raises(TestbedError) as err:
        b.apply(imp, lab.targets())
    assert "sch_netem" in err.value.message and "kernel lacks sch_netem" in err.value.message
    # the playbook's own preflight refuses too (a remote host or a by-hand run has no Python check)
    result = run_playbook("impair.yml", build_plan(imp, lab.targets()))
    assert result.status == "failed"
    assert any("kernel lacks sch_netem" in f and "sch_netem kernel module" in f for f in result.failures)
    assert not any(i["task"] == "apply" for i in result.items)
    assert b.show(lab.targets()) == before
    assert lab.leftovers() == []


def test_sigint_during_impairment_leaves_nothing_behind(lab: Lab, tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent("""
        import json, sys, time
        from orchestrator.backends import impairment as b
        from orchestrator.model.impairment import Impairment
        targets = [b.ImpairmentTarget.model_validate(t) for t in json.loads(sys.argv[1])]
        with b.impaired(Impairment(name="hold", loss_pct=5, rate_kbit=1000), targets):
            print("applied", flush=True)
            time.sleep(300)
    """))
    targets = json.dumps([t.model_dump(mode="json") for t in lab.targets()])
    proc = subprocess.Popen([sys.executable, str(script), targets], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "applied", proc.stderr.read() if proc.stderr else ""
        present = lab.leftovers()
        assert any("tbf 7e57:" in p for p in present) and any("testbed_impair" in p for p in present)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0  # interrupted, not finished
    assert lab.leftovers() == []


def test_clear_is_safe_twice_and_removes_only_ours(lab: Lab) -> None:
    targets = lab.targets()
    # someone else's qdisc and table must survive our clear
    sh(*lab.inside(lab.wire, "tc", "qdisc", "add", "dev", lab.wire_brk_if, "root", "handle", "1:", "tbf",
                   "rate", "1mbit", "burst", "1600", "latency", "50ms"))
    sh(*lab.inside(lab.wire, "nft", "add", "table", "inet", "someone_else"))
    b.apply(Impairment(name="both", loss_pct=1, rate_kbit=2000), targets)
    assert len(lab.leftovers()) == 2
    b.clear(targets)
    b.clear(targets)
    assert lab.leftovers() == []
    assert "tbf 1: root" in sh(*lab.inside(lab.wire, "tc", "qdisc", "show", "dev", lab.wire_brk_if)).stdout
    assert "someone_else" in sh(*lab.inside(lab.wire, "nft", "list", "tables")).stdout
    # a target whose namespace is gone (container removed) is nothing to clear, not an error
    sh("ip", "netns", "del", lab.pub)
    b.clear(targets)


def test_router_from_an_inventory_with_a_local_connection(lab: Lab, tmp_path: Path) -> None:
    """Multi-host path end to end: the `wire` namespace plays the router host, reached by inventory."""
    inventory = tmp_path / "lab.yml"
    inventory.write_text(textwrap.dedent(f"""
        all:
          children:
            broker:
              hosts:
                docker-host: {{ansible_host: 192.0.2.10}}
            router:
              hosts:
                router1:
                  ansible_connection: local
                  ansible_python_interpreter: {sys.executable}
                  impair_egress_interface: {lab.wire_brk_if}
                  impair_ingress_interface: {lab.wire_pub_if}
                  impair_peer_ip: {lab.brk_ip}
            publisher:
              hosts:
                esp32-1: {{publisher_kind: esp32}}
    """))
    script = tmp_path / "router.py"
    script.write_text(textwrap.dedent("""
        import sys
        from pathlib import Path
        from orchestrator.backends import impairment as b
        from orchestrator.model.impairment import Impairment
        inv = Path(sys.argv[1])
        targets = b.targets_for_router(b.load_inventory(inv))
        with b.impaired(Impairment(name="router", loss_pct=5, rate_kbit=500), targets, inventory=inv) as rec:
            print(rec.after)
    """))
    out = sh(*lab.inside(lab.wire, sys.executable, str(script), str(inventory)), check=False)
    assert out.returncode == 0, out.stderr
    assert f"$ [router1] tc qdisc show dev {lab.wire_brk_if}" in out.stdout
    assert "qdisc tbf 7e59: parent 7e57:1 rate 500Kbit" in out.stdout  # only towards the broker
    assert f"ip daddr {lab.brk_ip} numgen random mod 100 < 5 counter" in out.stdout
    assert lab.leftovers() == []


@pytest.mark.parametrize("profile", ["wifi-good", "wifi-congested"])
def test_netem_command_lines_parse_in_iproute2(profile: str) -> None:
    """tc parses netem's options (and loads distribution tables) before asking the kernel, so the
    argv is checked here even without sch_netem: only the kernel may refuse, never tc's parser."""
    target = ImpairmentTarget(label="publisher", netns_path="/proc/1/ns/net", interface="lo")
    root = apply_argvs(load_impairment(profile), target)[0]
    assert root[:2] == ["nsenter", "--net=/proc/1/ns/net"] and "netem" in root
    proc = sh("unshare", "--net", *root[2:], check=False)  # a throwaway namespace's loopback
    has_netem = kernel_has_netem()
    assert has_netem is not None, "tests/skips.py could not probe this kernel for sch_netem"
    if not has_netem:
        assert (proc.returncode, proc.stderr.strip()) == (2, "Error: Specified qdisc kind is unknown.")
    else:
        assert proc.returncode == 0, proc.stderr
