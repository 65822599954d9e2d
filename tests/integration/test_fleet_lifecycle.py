"""Issue 27 part 1 in CI, as the docker-group user: a fleet whose devices reconnect (``--devices N`` with every
connection mode, K readings per connection, asleep between connections), each device keeping its own TLS session
or ticket, and everything counted from the capture.

One sweep of four cells of the same 20-device fleet (persistent, reconnect, resume-id, resume-ticket): the
per-connection table (connections.csv) names each connection's device by the client id of its decrypted CONNECT;
every device's first connection is a full handshake and, resuming, every later one is resumed on the wire. The
table's counts are checked against tshark's own count of the capture's ClientHellos, the broker's Certificate
messages and the ServerHellos without a Certificate. The broker's CPU per handshake of each kind comes from the
same run, and the report solves the cost model F / K + m at this fleet size. The acceptance size (1,000 devices)
runs in bench/fleet_lifecycle.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from .conftest import owned
from .docker_user import DockerUser

DEVICES, K, CONNS = 20, 3, 4  # 20 devices started over 4 s, each ~6 s of connections: ~10 stats windows
MODES = ("persistent", "reconnect", "resume-id", "resume-ticket")
HS_CLIENT_HELLO, HS_SERVER_HELLO, HS_CERTIFICATE = 1, 2, 11


@pytest.fixture(scope="module")
def bundle(docker_user: DockerUser) -> Path:
    docker_user.testbed("down")
    out = docker_user.mkdir(docker_user.work / "fleet-lifecycle")
    proc = docker_user.testbed("sweep", "--devices", str(DEVICES), "--connect-rate", "5", "--samples",
                               str(K * CONNS), "--interval", "400ms", "--per-connection", str(K), "--sleep", "1s",
                               "--connections", ",".join(MODES), "--payloads", "65", "--scenarios", "tls",
                               "--baseline", "tls", "--out", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


def _run(bundle: Path, mode: str) -> Path:
    suffix = "" if mode == "persistent" else f"-{mode}"
    return bundle / "runs" / f"tls-65B-none{suffix}-{DEVICES}dev-r1"


def _wire_counts(run: Path, publisher_ips: set[str]) -> dict[str, int]:
    """tshark's own count over the capture, the publisher's connections only: ClientHellos, the broker's Certificate
    messages, and ServerHellos in a connection without a Certificate (a resumed TLS 1.2 handshake)."""
    out = subprocess.run(["tshark", "-r", str(run / "capture" / "capture.pcapng"), "-Y", "tls.handshake.type",
                          "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "tcp.stream", "-e",
                          "ip.src", "-e", "ip.dst", "-e", "tls.handshake.type"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    hellos, certs, server_hellos = 0, set(), set()
    for line in out.splitlines():
        stream, src, dst, types = line.split("\t")
        kinds = {int(t) for t in types.split(",") if t}
        if src in publisher_ips:
            hellos += HS_CLIENT_HELLO in kinds
        elif dst in publisher_ips:
            if HS_CERTIFICATE in kinds:
                certs.add(stream)
            if HS_SERVER_HELLO in kinds:
                server_hellos.add(stream)
    return {"client_hello": hellos, "certificate": len(certs), "resumed_server_hello": len(server_hellos - certs)}


@pytest.mark.parametrize("mode", ["resume-ticket", "resume-id"])
def test_each_device_resumes_its_own_session_and_the_wire_agrees(bundle: Path, mode: str) -> None:
    run = _run(bundle, mode)
    metrics = json.loads((run / "metrics.json").read_text())
    conns = pd.read_csv(run / "connections.csv")
    block = metrics["connections"]
    kind = "resumed-" + mode.removeprefix("resume-")
    wire = _wire_counts(run, set(conns["client_ip"].astype(str)))
    print(f"{mode}: table {block['handshakes']}, wire {wire}, verdict {block['verdict']}")
    assert block["count"] == DEVICES * CONNS == len(conns) and block["missing"] == 0
    assert block["devices"] == DEVICES and conns["device"].nunique() == DEVICES
    assert sorted(conns["device"].unique()) == [f"f{i:04d}" for i in range(DEVICES)]
    first = conns["device_conn"] == 0
    assert (conns.loc[first, "handshake"] == "full").all() and (conns.loc[~first, "handshake"] == kind).all()
    assert block["resumed_after_first"] == block["reconnections"] == DEVICES * (CONNS - 1)
    assert block["verdict"] == "every reconnection resumed"
    assert block["client_claims"]["compared"] == DEVICES * CONNS and block["client_claims"]["mismatches"] == []
    # the devices' own handshake times are labelled with the CPU they ran on: the loader's summary's
    clock = block["device_phases"]["clock"]
    assert clock.startswith("host CPU ") and clock.endswith(" (virtual device)"), clock
    # the table's counts are the capture's own
    assert wire["client_hello"] == len(conns)
    assert wire["certificate"] == block["handshakes"]["full"] == DEVICES
    assert wire["resumed_server_hello"] == block["handshakes"][kind] == DEVICES * (CONNS - 1)
    # every reading of every device arrived, each connection carrying its K
    fleet = metrics["fleet"]
    assert fleet["messages"]["delivered"] == fleet["messages"]["expected"] == DEVICES * K * CONNS


def test_the_sleep_between_connections_is_on_the_wire(bundle: Path) -> None:
    """Each device's next connection opens about 1 s after its previous one's last reading (K at 400 ms)."""
    conns = pd.read_csv(_run(bundle, "resume-ticket") / "connections.csv")
    gaps = conns.sort_values("syn_time").groupby("device")["syn_time"].diff().dropna()
    # connection c + 1 opens (K - 1) x 400 ms + 1 s after connection c opened
    assert gaps.median() == pytest.approx(2 * 0.4 + 1.0, abs=0.1), gaps.describe()


def test_broker_cpu_per_handshake_kind_from_the_same_run(bundle: Path) -> None:
    for mode, kind in (("resume-ticket", "resumed-ticket"), ("resume-id", "resumed-id"), ("reconnect", None)):
        metrics = json.loads((_run(bundle, mode) / "metrics.json").read_text())
        cpu = metrics["broker_cpu"]["process"] or metrics["broker_cpu"]["cgroup"]
        per_kind = cpu["per_handshake_kind"]
        print(f"{mode}: broker CPU per handshake kind {json.dumps(per_kind)}")
        full = per_kind["handshakes"]["full"]
        assert full is not None and full["events"] == (DEVICES * CONNS if kind is None else DEVICES), per_kind
        assert full["ci95_low"] is not None and full["ci95_high"] is not None
        if kind is not None:
            assert per_kind["handshakes"][kind]["events"] == DEVICES * (CONNS - 1)
        assert per_kind["per_reading"]["events"] == DEVICES * K * CONNS


def test_the_report_solves_the_cost_model_at_fleet_scale(bundle: Path) -> None:
    report = (bundle / "report.md").read_text()
    assert "## Connection lifecycle" in report and "TLS cost per reading" in report
    lines = [ln for ln in report.splitlines() if ln.startswith(f"| 65 | none, {DEVICES} devices | tls |")]
    print("\n".join(lines))
    assert {ln.split(" | ")[3] for ln in lines} == {"full handshake", "resumed (id)", "resumed (ticket)"}
    assert owned("container") == [] and owned("network") == []
