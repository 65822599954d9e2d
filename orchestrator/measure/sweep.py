"""`testbed sweep`: the study's matrix into one results bundle, unattended and resumable.

The plan is validated completely before anything starts; every cell runs on a fresh broker and
fresh clients; a failed cell is recorded with its logs and the sweep goes on; Ctrl-C (or SIGTERM)
tears the current cell down, marks it interrupted, keeps every finished cell and prints the
`--resume` command that runs exactly the missing cells.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from orchestrator.backends import docker_engine
from orchestrator.backends.images import image_digest, spec
from orchestrator.backends.impairment import check_supported
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError
from orchestrator.measure.run import check_publisher_can_speak, execute_run, preflight
from orchestrator.model.impairment import load_impairment
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import Cell, SweepPlan
from orchestrator.model.yamlfile import describe_validation_error
from orchestrator.results import bundle as bundles
from orchestrator.results.atomic import read_json


class SweepProgress(Protocol):
    def cell_started(self, index: int, total: int, cell: Cell, expected_s: float) -> None: ...
    def messages(self, received: int, expected: int) -> None: ...
    def cell_finished(self, cell: Cell, status: str, error: str | None) -> None: ...
    def note(self, message: str) -> None: ...


@dataclass
class SweepResult:
    bundle: Path
    statuses: dict[str, str] = field(default_factory=dict)
    derived: list[Path] = field(default_factory=list)


def make_plan(**fields: Any) -> SweepPlan:
    try:
        return SweepPlan(**fields)
    except ValidationError as exc:
        raise TestbedError("impossible sweep plan", evidence=describe_validation_error(exc, "plan")) from exc


def validate_plan(plan: SweepPlan) -> None:
    """Everything that can be refused before a container starts."""
    for name in plan.scenarios:
        scenario = load_scenario(name)
        check_publisher_can_speak(scenario, plan.run_spec(plan.cells()[0]))
    for name in plan.impairments:
        check_supported(load_impairment(name))
    if plan.baseline not in plan.scenarios:
        raise TestbedError(f"baseline scenario {plan.baseline!r} is not in --scenarios "
                           f"({', '.join(plan.scenarios)})", hint="add it or choose --baseline")


def tool_versions() -> dict[str, Any]:
    """Versions of what measured: docker, compose, tshark, mosquitto, mbedTLS; image digests."""
    def first_line(argv: list[str]) -> str | None:
        if which(argv[0]) is None:
            return None
        proc = run(argv, check=False, timeout=60)
        text = (proc.stdout or proc.stderr).strip()
        return text.splitlines()[0] if proc.returncode == 0 and text else None

    def in_image(image: str, package_glob: str) -> str | None:
        return first_line(["docker", "run", "--rm", "--network", "none", "--entrypoint", "dpkg-query", image,
                           "-W", "-f", "${Package} ${Version}\\n", package_glob])

    return {
        "docker": docker_engine.engine_version(),
        "compose": docker_engine.compose_version(),
        "tshark": first_line(["tshark", "--version"]),
        "mosquitto": in_image(spec("broker").tag, "mosquitto"),
        "mbedtls": in_image(spec("publisher").tag, "libmbedtls*"),
        "openssl_broker": in_image(spec("broker").tag, "libssl3"),
        "image_digests": {s: image_digest(spec(s).tag) for s in ("broker", "capture", "subscriber", "publisher")},
        "tcp_nodelay": "publisher (vdevice) and subscriber set TCP_NODELAY",
    }


def start_sweep(plan: SweepPlan, out_root: Path, name: str, command: list[str]) -> Path:
    validate_plan(plan)
    preflight(load_scenario(plan.scenarios[0]), plan.run_spec(plan.cells()[0]))
    bundles.check_writable(out_root)
    bundle = bundles.new_bundle_dir(out_root, name)
    bundle.mkdir(parents=True)
    bundles.save_manifest(bundle, bundles.new_manifest(plan, name, command, tool_versions()))
    return bundle


def resume_sweep(bundle: Path) -> tuple[SweepPlan, list[Cell]]:
    manifest = bundles.load_manifest(bundle)
    plan = bundles.plan_of(manifest)
    validate_plan(plan)
    preflight(load_scenario(plan.scenarios[0]), plan.run_spec(plan.cells()[0]))
    bundles.check_writable(bundle)
    return plan, bundles.missing_cells(bundle, plan)


def run_cells(bundle: Path, plan: SweepPlan, cells: list[Cell], progress: SweepProgress) -> SweepResult:
    result = SweepResult(bundle)
    total = len(cells)
    for index, cell in enumerate(cells, start=1):
        run_dir = bundle / "runs" / cell.cell_id
        if run_dir.exists():  # an interrupted or failed earlier attempt: start the cell afresh
            shutil.rmtree(run_dir)
        spec_ = plan.run_spec(cell)
        progress.cell_started(index, total, cell, spec_.expected_duration_s)
        entry: dict[str, Any] = {"started_utc": _now()}
        status, error = "failed", None
        try:
            outcome = execute_run(spec_, run_dir, cell={"cell_id": cell.cell_id, "repeat": cell.repeat,
                                                         "scenario": cell.scenario, "payload": cell.payload,
                                                         "impairment": cell.impairment},
                                  progress=progress.messages, status=progress.note)
            status, error = outcome.status, outcome.error
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted by the user (SIGINT)"
            raise
        except TestbedError as exc:
            status, error = "failed", exc.message
        finally:
            entry.update(status=status, error=error, finished_utc=_now())
            impairment = read_json(run_dir / "cell.json").get("impairment_state")
            if impairment:
                entry["impairment_state"] = impairment
            _record_cell(bundle, cell, entry)
            result.statuses[cell.cell_id] = status
            progress.cell_finished(cell, status, error)
    return result


def _record_cell(bundle: Path, cell: Cell, entry: dict[str, Any]) -> None:
    manifest = bundles.load_manifest(bundle)
    manifest.setdefault("cells", {})[cell.cell_id] = entry
    bundles.save_manifest(bundle, manifest)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def build_derived(bundle: Path, baseline: str | None = None, grading: Sequence[Path] = ()) -> list[Path]:
    from orchestrator.report.build import build_report

    return build_report(bundle, baseline=baseline, grading_tables=list(grading))


def rebuild_bundle(bundle: Path, baseline: str | None = None, grading: Sequence[Path] = (),
                   progress: Callable[[str], None] = lambda _m: None) -> list[Path]:
    """Re-analyse every run from its raw files (capture, logs, key logs), then rebuild the report."""
    from orchestrator.measure.analyse import analyse_run_dir
    from orchestrator.model.run import RunSpec
    from orchestrator.model.scenario import Scenario

    manifest = bundles.load_manifest(bundle)
    written: list[Path] = []
    for run_dir in sorted((bundle / "runs").glob("*")):
        cell = read_json(run_dir / "cell.json")
        scenario_data = read_json(run_dir / "config" / "scenario.json")
        if not cell or not scenario_data or not (run_dir / "capture" / "capture.pcapng").exists():
            progress(f"{run_dir.name}: no raw capture; left as it is")
            continue
        progress(f"{run_dir.name}: re-analysing the capture")
        try:
            analyse_run_dir(run_dir, Scenario.model_validate(scenario_data), RunSpec.model_validate(cell["spec"]))
        except TestbedError as exc:
            progress(f"{run_dir.name}: analysis failed: {exc.message}")
            continue
        written += [run_dir / n for n in ("per_message.csv", "packets.csv", "metrics.json")]
    written += build_derived(bundle, baseline=baseline or manifest.get("plan", {}).get("baseline"),
                             grading=grading)
    return written
