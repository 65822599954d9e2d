"""--delay-mechanism from the spec to the records: RunSpec and SweepPlan carry it, the manifest and cell.json
record it (older records without it read as auto), a resumed bundle keeps it, validate_plan hands it to the
impairment check, and the run/sweep summaries and doctor say which mechanism made the delay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.impairment import probe
from orchestrator.cli import render
from orchestrator.doctor import checks as doctor
from orchestrator.doctor import probes as doctor_probes
from orchestrator.errors import TestbedError
from orchestrator.measure import local
from orchestrator.measure import sweep as sw
from orchestrator.model.impairment import DELAY_MECHANISMS, Impairment, load_impairment
from orchestrator.model.run import RunSpec
from orchestrator.model.sweep import SweepPlan
from orchestrator.model.yamlfile import user_input
from orchestrator.results import manifest as bundles
from orchestrator.results.schema import SCHEMA_VERSION

QUEUE_STATE = {"profile": "wifi-good", "applied": True, "delay_mechanism": "queue",
               "impairment": {"name": "wifi-good", "delay_ms": 5.0, "jitter_ms": 2.0, "distribution": "normal",
                              "loss_pct": 0.1, "loss_correlation_pct": 0.0, "rate_kbit": None,
                              "direction": "publisher->broker"}}


# ----------------------------------------------------------------------------- specs and plans

def test_the_spec_and_the_plan_default_to_auto_and_refuse_an_unknown_mechanism() -> None:
    assert RunSpec(scenario="tls").delay_mechanism == "auto" and SweepPlan().delay_mechanism == "auto"
    assert set(DELAY_MECHANISMS) == {"auto", "netem", "queue"}
    with pytest.raises(TestbedError) as err, user_input("run parameters"):
        RunSpec(scenario="tls", delay_mechanism="tc")  # type: ignore[arg-type]
    assert err.value.message.startswith("invalid run parameters: delay_mechanism: Input should be 'auto', 'netem'")


def test_every_cell_of_a_plan_runs_with_its_mechanism() -> None:
    plan = SweepPlan(payloads=[65], impairments=["none", "wifi-good"], repeat=2, delay_mechanism="queue")
    assert {plan.run_spec(c).delay_mechanism for c in plan.cells()} == {"queue"}


def _manifest(plan: SweepPlan) -> dict[str, Any]:
    return bundles.new_manifest(plan, "sweep", ["testbed", "sweep"], source={"git_commit": "abc"},
                                environment={})


def test_the_manifest_records_the_plans_mechanism_and_gives_it_back(tmp_path: Path) -> None:
    plan = SweepPlan(payloads=[65], delay_mechanism="netem")
    bundles.save_manifest(tmp_path, _manifest(plan))
    recorded = json.loads((tmp_path / "manifest.json").read_text())
    assert recorded["plan"]["delay_mechanism"] == "netem"
    assert bundles.plan_of(bundles.load_manifest(tmp_path), tmp_path) == plan


def test_a_manifest_from_before_the_mechanism_reads_as_auto(tmp_path: Path) -> None:
    manifest = _manifest(SweepPlan(payloads=[65], impairments=["wifi-good"]))
    del manifest["plan"]["delay_mechanism"]
    assert manifest["schema_version"] == SCHEMA_VERSION["manifest"]  # an optional field: no new version
    bundles.save_manifest(tmp_path, manifest)
    plan = bundles.plan_of(bundles.load_manifest(tmp_path), tmp_path)
    assert plan.delay_mechanism == "auto" and plan.impairments == ["wifi-good"]


def test_a_cell_spec_from_before_the_mechanism_reads_as_auto() -> None:
    spec = RunSpec(scenario="tls", impairment="wifi-good", delay_mechanism="queue")
    recorded = json.loads(json.dumps(spec.model_dump()))  # as cell.json's "spec"
    assert RunSpec.model_validate(recorded) == spec
    del recorded["delay_mechanism"]
    assert RunSpec.model_validate(recorded) == spec.model_copy(update={"delay_mechanism": "auto"})


@pytest.mark.parametrize("recorded", ["queue", None])
def test_resuming_a_bundle_keeps_its_mechanism(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               recorded: str | None) -> None:
    validated: list[SweepPlan] = []
    monkeypatch.setattr(sw, "validate_plan", validated.append)
    monkeypatch.setattr(sw, "preflight", lambda scenario, spec: validated.append(spec))
    manifest = _manifest(SweepPlan(payloads=[65], impairments=["wifi-good"], delay_mechanism="queue"))
    if recorded is None:
        del manifest["plan"]["delay_mechanism"]
    bundles.save_manifest(tmp_path, manifest)

    job = sw.resume_sweep(tmp_path)

    expected = recorded or "auto"
    assert job.plan.delay_mechanism == expected and len(job.cells) == 2
    # the plan, then one spec per lab configuration (plain and tls with wifi-good)
    assert [v.delay_mechanism for v in validated] == [expected, expected, expected]
    assert {job.plan.run_spec(c).delay_mechanism for c in job.cells} == {expected}


def test_validate_plan_checks_every_impairment_with_the_plans_mechanism(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[tuple[str, str]] = []

    def check(impairment: Impairment, *, in_containers: bool = True, mechanism: str = "auto") -> None:
        checked.append((impairment.name, mechanism))
        if impairment.name == "wifi-good" and mechanism == "netem":
            raise TestbedError("kernel lacks sch_netem: profile wifi-good needs delay/jitter/correlated loss")

    monkeypatch.setattr(local, "check_supported", check)  # this host's site checks a sweep's profiles
    sw.validate_plan(SweepPlan(impairments=["lossy-1pct", "wifi-good"], delay_mechanism="queue"))
    assert checked == [("lossy-1pct", "queue"), ("wifi-good", "queue")]
    with pytest.raises(TestbedError) as err:
        sw.validate_plan(SweepPlan(impairments=["wifi-good"], delay_mechanism="netem"))
    assert err.value.message.startswith("kernel lacks sch_netem: profile wifi-good")


def test_a_fifo_profile_under_jitter_takes_the_queue_even_where_netem_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "netem_available", lambda: True)
    monkeypatch.setattr(probe, "helper_ready", lambda: None)
    fifo = Impairment(name="f", delay_ms=5, jitter_ms=2, order="fifo")
    assert probe.resolve_mechanism(fifo, "auto") == "queue"
    assert probe.resolve_mechanism(Impairment(name="r", delay_ms=5, jitter_ms=2), "auto") == "netem"
    assert probe.resolve_mechanism(Impairment(name="c", delay_ms=5, order="fifo"), "auto") == "netem"
    with pytest.raises(TestbedError) as err:
        probe.check_supported(fifo, mechanism="netem")
    assert "order fifo needs the userspace delay line" in err.value.message
    assert load_impairment("wifi-good").order == "fifo" and load_impairment("wifi-congested").order == "fifo"


# ----------------------------------------------------------------------------- run and sweep summaries

def _cell(folder: Path, impairment: str, state: dict[str, Any] | None, status: str = "ok") -> None:
    folder.mkdir(parents=True)
    cell: dict[str, Any] = {"cell_id": folder.name, "impairment": impairment, "status": status}
    if state is not None:
        cell["impairment_state"] = state
    (folder / "cell.json").write_text(json.dumps(cell))


def _rows(table: Any) -> dict[str, list[str]]:
    return {col.header: [str(v) for v in col._cells] for col in table.columns}


def test_the_sweep_summary_names_each_cells_delay_mechanism(tmp_path: Path) -> None:
    netem = {**QUEUE_STATE, "delay_mechanism": "netem"}
    loss_only = {"profile": "lossy-1pct", "applied": True, "delay_mechanism": None}
    old = {"profile": "wifi-good", "applied": True}  # recorded before the key existed
    cells = [("a-none", "none", {"profile": "none", "applied": False}), ("b-queue", "wifi-good", QUEUE_STATE),
             ("c-netem", "wifi-good", netem), ("d-loss", "lossy-1pct", loss_only), ("e-old", "wifi-good", old),
             ("f-failed", "wifi-good", None)]
    for name, impairment, state in cells:
        _cell(tmp_path / "runs" / name, impairment, state)
    (tmp_path / "manifest.json").write_text(json.dumps({"cell_order": [c[0] for c in cells]}))

    columns = _rows(render.sweep_summary(tmp_path))

    assert columns["cell"] == [c[0] for c in cells]
    assert columns["delay mech"] == ["-", "queue", "netem", "-", "n/a", "n/a"]


def test_the_run_summary_of_an_impaired_run_names_its_mechanism(tmp_path: Path) -> None:
    _cell(tmp_path / "run", "wifi-good", QUEUE_STATE)
    table = render.run_summary(RunSpec(scenario="tls", impairment="wifi-good"), {}, tmp_path / "run")
    rows = dict(zip(*_rows(table).values(), strict=True))
    assert rows["delay mechanism (wifi-good)"] == "queue"
    plain = render.run_summary(RunSpec(scenario="tls"), {}, tmp_path / "run")
    assert not any(k.startswith("delay mechanism") for k in _rows(plain)["metric"])


# ----------------------------------------------------------------------------- doctor

def test_doctor_says_netem_where_a_helper_can_add_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "helper_ready", lambda: None)
    monkeypatch.setattr(probe, "netem_probe", lambda: (True, ""))
    assert doctor_probes.delay_mechanism() == "netem (sch_netem available)"


def test_doctor_says_queue_on_a_kernel_without_netem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "helper_ready", lambda: None)
    monkeypatch.setattr(probe, "netem_probe", lambda: (False, "Error: Specified qdisc kind is unknown."))
    monkeypatch.setattr(probe, "line_floor", lambda: {"median_ms": 0.0904, "p99_ms": 0.2, "received": 300})
    assert doctor_probes.delay_mechanism() == ("queue: userspace delay line (kernel lacks sch_netem); its floor "
                                               "here +0.090 ms median, +0.200 ms p99 (300 datagrams through it, "
                                               "measured now)")

    def unmeasured() -> dict:
        raise TestbedError("the delay line's floor could not be measured: not found")

    monkeypatch.setattr(probe, "line_floor", unmeasured)
    monkeypatch.setattr(probe, "netem_probe", lambda: (False, "RTNETLINK answers: Operation not permitted"))
    assert doctor_probes.delay_mechanism() == (
        "queue: userspace delay line (a helper cannot add a netem qdisc: RTNETLINK answers: Operation not "
        "permitted); the delay line's floor could not be measured: not found")


def test_doctor_gives_no_mechanism_without_a_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_helper() -> None:
        raise TestbedError("the impairment helper image testbed-netadmin:latest is not built")

    monkeypatch.setattr(probe, "helper_ready", no_helper)
    check = doctor._probe(doctor.DELAY_CHECK, doctor_probes.delay_mechanism, "")
    assert not check.ok and check.detail == "the impairment helper image testbed-netadmin:latest is not built"


def test_the_doctor_row_is_optional_and_follows_the_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "_images", lambda: "all built")
    monkeypatch.setattr(doctor_probes, "capture_writes_run_folder", lambda out: "ok")
    monkeypatch.setattr(doctor_probes, "helper_lists_qdiscs", lambda: "tc in testbed-netadmin:latest")
    monkeypatch.setattr(doctor_probes, "netem", lambda: "a helper can add a netem qdisc")
    monkeypatch.setattr(doctor_probes, "nft", lambda: "a helper can create an nftables table")
    monkeypatch.setattr(doctor_probes, "delay_mechanism", lambda: "netem (sch_netem available)")
    rows = {c.name: c for c in doctor._container_checks(doctor.Check("docker engine", True, "27.0"), tmp_path)}
    row = rows["delay mechanism (auto)"]
    assert row.ok and not row.required and row.detail == "netem (sch_netem available)"
    engine_down = doctor._container_checks(doctor.Check("docker engine", False, "down"), tmp_path)
    assert [c.skipped and not c.required for c in engine_down if c.name == doctor.DELAY_CHECK] == [True]
