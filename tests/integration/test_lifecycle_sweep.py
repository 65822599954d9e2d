"""Issue 13's acceptance, as the docker-group user: connection lifecycle as a measured axis, every figure
read from the capture (connections.csv / metrics.json connections) and checked against what was asked."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from .conftest import owned
from .docker_user import DockerUser

MODES = ("persistent", "reconnect", "resume-id", "resume-ticket")
SAMPLES = 100  # connections per cell: every one classified from the wire, the break-even from their medians


def _sweep(user: DockerUser, name: str, *args: str) -> Path:
    user.testbed("down")
    out = user.mkdir(user.work / name)
    proc = user.testbed("sweep", "--payloads", "65", "--interval", "50ms", "--out", str(out), *args, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(p for p in out.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def lifecycle_bundle(docker_user: DockerUser) -> Path:
    return _sweep(docker_user, "lifecycle", "--samples", str(SAMPLES), "--scenarios", "plain,tls",
                  "--connections", ",".join(MODES))


def _cell(bundle: Path, cell_id: str) -> tuple[dict, dict, pd.DataFrame | None]:
    run = bundle / "runs" / cell_id
    conns = pd.read_csv(run / "connections.csv") if (run / "connections.csv").exists() else None
    return (json.loads((run / "cell.json").read_text()), json.loads((run / "metrics.json").read_text()), conns)


def test_every_reconnection_after_the_first_is_resumed_on_the_wire(lifecycle_bundle: Path) -> None:
    manifest = json.loads((lifecycle_bundle / "manifest.json").read_text())
    assert len(manifest["cells"]) == 8 and {c["status"] for c in manifest["cells"].values()} == {"ok"}
    for mode, kind in (("resume-id", "resumed-id"), ("resume-ticket", "resumed-ticket")):
        _info, metrics, conns = _cell(lifecycle_bundle, f"tls-65B-none-{mode}-r1")
        block = metrics["connections"]
        print(f"tls {mode}: {block['resumed_after_first']} of {block['reconnections']} resumed; "
              f"by kind {block['by_kind']}")
        assert block["count"] == SAMPLES and block["missing"] == 0 and len(conns) == SAMPLES
        assert conns["handshake"].iloc[0] == "full" and (conns["handshake"].iloc[1:] == kind).all()
        assert block["resumed_after_first"] == SAMPLES - 1 and block["verdict"] == "every reconnection resumed"
        assert block["client_claims"]["compared"] == SAMPLES and block["client_claims"]["mismatches"] == []
        full, resumed = block["by_kind"]["full"], block["by_kind"][kind]
        assert resumed["wire_bytes_median"] < full["wire_bytes_median"] - 500  # no Certificate, no ECDHE
        cpu = metrics["broker_cpu"]["process"] or metrics["broker_cpu"]["cgroup"]
        assert cpu["per_connection"]["events"] >= SAMPLES * 0.8, cpu  # the windows hold the connections
    info, metrics, conns = _cell(lifecycle_bundle, "tls-65B-none-reconnect-r1")
    said = (metrics["connections"], conns["evidence"].value_counts().to_dict(), info.get("lab"), info.get("warnings"))
    assert metrics["connections"]["handshakes"]["full"] == SAMPLES, said
    assert (conns["tcp_end"] != "capture end").all(), said


def test_plain_cells_asked_to_resume_run_as_reconnect_and_say_so(lifecycle_bundle: Path) -> None:
    for mode in ("resume-id", "resume-ticket"):
        info, metrics, conns = _cell(lifecycle_bundle, f"plain-65B-none-{mode}-r1")
        assert info["connection"]["used"] == "reconnect" and "no TLS session to resume" in info["connection"]["note"]
        assert metrics["connections"]["handshakes"]["none"] == SAMPLES == len(conns)


def test_the_report_gives_the_cost_per_reading_and_the_break_even(lifecycle_bundle: Path) -> None:
    report = (lifecycle_bundle / "report.md").read_text()
    assert "## Connection lifecycle" in report and "TLS cost per reading" in report
    assert (lifecycle_bundle / "plots" / "cost_per_reading.png").stat().st_size > 1000
    comparisons = pd.read_csv(lifecycle_bundle / "comparisons.csv")
    rows = comparisons[comparisons["metric"] == "wire_bytes_per_reading"]
    assert set(rows["connection"]) == {"reconnect", "resume-id", "resume-ticket"}, rows
    lines = [ln for ln in report.splitlines() if ln.startswith("| 65 | none | tls |")]
    print("\n".join(ln for ln in report.splitlines() if ln.startswith("| 65 | none |")))
    assert {ln.split(" | ")[3] for ln in lines} == {"full handshake", "resumed (id)", "resumed (ticket)"}
    assert owned("container") == [] and owned("network") == []


def _md_table(report: str, caption_start: str) -> list[dict[str, str]]:
    """The rows of the report.md table whose caption starts with ``caption_start`` (report/document.py's layout:
    *caption*, a blank line, the header, the rule, the rows)."""
    lines = report.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"*{caption_start}"))
    head = [c.strip() for c in lines[at + 2].strip("|").split("|")]
    rows = []
    for ln in lines[at + 4:]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True)))
    return rows


def test_the_report_projects_each_handshake_kind_on_an_esp32_with_every_figures_source(
        lifecycle_bundle: Path) -> None:
    """Issue 41's acceptance: the ESP32 projection for each handshake kind the sweep's TLS cells had, every
    per-operation value with its source, labelled projected (not a measurement)."""
    report = (lifecycle_bundle / "report.md").read_text()
    cells = sorted(p.name for p in (lifecycle_bundle / "runs").glob("tls-*"))
    assert len(cells) == len(MODES), cells
    tables = [conns for cell in cells if (conns := _cell(lifecycle_bundle, cell)[2]) is not None]  # not persistent's
    kinds = {str(k) for conns in tables for k in conns["handshake"].dropna()}
    projected = _md_table(report, "The ESP32 projection per handshake kind (projected (ESP32 240 MHz")
    assert {r["handshake"] for r in projected} == kinds == {"full", "resumed-id", "resumed-ticket"}, projected
    assert {r["stack"] for r in projected} == {"mbedtls-2.28", "mbedtls-3.6"}
    sources = _md_table(report, "The per-operation figures and their sources (projected")
    listed = {(r["stack"], r["operation"]) for r in sources}
    for r in projected:  # every operation a projection counts has its figure's source beside it
        ops = [op.split(" x ", 1)[1] for op in r["operations"].split(", ") if " x " in op]
        assert ops and all((r["stack"], op) in listed for op in ops), (r, listed)
    assert all(r["source"] for r in sources)
    for r in projected:  # a sum with an operation the table has no figure for is a floor, and says which
        partial = r["projected device ms"].startswith(("at least ", "n/a"))
        assert partial == (r["unknown in the table"] != "-"), r
    full36 = next(r for r in projected if r["handshake"] == "full" and r["stack"] == "mbedtls-3.6")
    assert float(full36["projected device ms"].removeprefix("at least ")) > 100, full36  # ECDSA verifies, ECDHE


def test_tickets_off_the_ticket_mode_shows_full_handshakes_and_the_report_says_refused(
        docker_user: DockerUser) -> None:
    bundle = _sweep(docker_user, "noticket", "--samples", "30", "--scenarios", "tls-noticket",
                    "--baseline", "tls-noticket", "--connections", "resume-ticket,resume-id")
    _info, metrics, _conns = _cell(bundle, "tls-noticket-65B-none-resume-ticket-r1")
    assert metrics["connections"]["handshakes"]["full"] == 30
    assert metrics["connections"]["verdict"].startswith("resumption refused")
    assert "resumption refused" in (bundle / "report.md").read_text()
    _info, metrics, _conns = _cell(bundle, "tls-noticket-65B-none-resume-id-r1")  # the ID cache stays
    assert metrics["connections"]["resumed_after_first"] == 29


def test_links_dropped_without_close_notify_what_id_resumption_does(docker_user: DockerUser) -> None:
    bundle = _sweep(docker_user, "drop", "--samples", "30", "--scenarios", "tls", "--baseline", "tls",
                    "--connections", "resume-id", "--close", "drop")
    _info, metrics, conns = _cell(bundle, "tls-65B-none-resume-id-r1")
    block = metrics["connections"]
    print(f"resume-id after drops: {block['handshakes']}, verdict {block['verdict']}, ends {block['tcp_end']}")
    assert block["count"] == 30 and block["close"] == "drop"
    assert set(conns["tcp_end"]) <= {"FIN client", "RST client", "RST server", "FIN server"}
    assert not conns["close_notify_client"].fillna(False).astype(bool).any()  # none sent, as asked
    assert block["verdict"] is not None and block["verdict"] in (bundle / "report.md").read_text()


def test_n_reconnects_are_n_connections_under_loss(docker_user: DockerUser) -> None:
    docker_user.testbed("down")
    out = docker_user.work / "runs" / "lifecycle-lossy"
    docker_user.mkdir(out.parent)
    proc = docker_user.testbed("run", "--scenario", "tls", "--samples", "100", "--interval", "30ms",
                               "--connection", "resume-id", "--impairment", "lossy-1pct", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    block = json.loads((out / "metrics.json").read_text())["connections"]
    conns = pd.read_csv(out / "connections.csv")
    assert block["count"] == 100 == len(conns) == conns["client_port"].nunique() and block["missing"] == 0
    print(f"lossy-1pct resume-id: {block['handshakes']}, retransmitted up "
          f"{int(conns['retransmitted_client_to_server'].sum())} B")
