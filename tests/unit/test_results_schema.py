"""The results format's one schema check: current data unchanged, older migrated in order, newer refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis import pipeline
from orchestrator.errors import TestbedError
from orchestrator.report.loader import read_manifest, read_metrics
from orchestrator.results import schema
from orchestrator.results.manifest import load_manifest


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["manifest", "metrics"])
def test_current_version_is_returned_unchanged(tmp_path: Path, kind: schema.Kind) -> None:
    data = {"schema_version": schema.SCHEMA_VERSION[kind], "seed": 3, "nested": {"a": [1, 2]}}
    before = json.loads(json.dumps(data))
    assert schema.check_schema(data, tmp_path / "x.json", kind) is data
    assert data == before


def test_registered_migrations_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, dict[str, Any]]] = []

    def one_to_two(data: dict[str, Any]) -> dict[str, Any]:
        calls.append((1, dict(data)))
        return {**data, "seed": data["old_seed"]}

    def two_to_three(data: dict[str, Any]) -> dict[str, Any]:
        calls.append((2, dict(data)))
        return {k: v for k, v in data.items() if k != "old_seed"}

    monkeypatch.setitem(schema.SCHEMA_VERSION, "manifest", 3)
    monkeypatch.setitem(schema.MIGRATIONS, "manifest", {2: two_to_three, 1: one_to_two})
    _write(tmp_path / "manifest.json", {"schema_version": 1, "old_seed": 7})

    migrated = load_manifest(tmp_path)

    assert [step for step, _ in calls] == [1, 2]
    assert calls[0][1] == {"schema_version": 1, "old_seed": 7}
    assert calls[1][1] == {"schema_version": 2, "old_seed": 7, "seed": 7}
    assert migrated == {"schema_version": 3, "seed": 7}
    assert read_manifest(tmp_path) == migrated  # the report reads the manifest through the same check
    assert json.loads((tmp_path / "manifest.json").read_text())["schema_version"] == 1  # in memory only


def test_metrics_migrate_through_the_report_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(schema.SCHEMA_VERSION, "metrics", 2)
    monkeypatch.setitem(schema.MIGRATIONS, "metrics", {1: lambda d: {**d, "loss": {"loss_pct": d["loss_pct"]}}})
    path = _write(tmp_path / "metrics.json", {"schema_version": 1, "loss_pct": 0.5})
    assert read_metrics(path) == {"schema_version": 2, "loss_pct": 0.5, "loss": {"loss_pct": 0.5}}


@pytest.mark.parametrize("kind", ["manifest", "metrics"])
def test_newer_is_refused_naming_both_versions(tmp_path: Path, kind: schema.Kind) -> None:
    current = schema.SCHEMA_VERSION[kind]
    path = tmp_path / f"{kind}.json"
    with pytest.raises(TestbedError) as exc:
        schema.check_schema({"schema_version": current + 1}, path, kind)
    assert exc.value.message == (f"{path}: schema_version {current + 1} is newer than this testbed "
                                 f"understands ({current})")
    assert exc.value.hint and "upgrade" in exc.value.hint


def test_older_without_a_migration_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(schema.SCHEMA_VERSION, "manifest", 2)
    monkeypatch.setitem(schema.MIGRATIONS, "manifest", {})
    with pytest.raises(TestbedError, match="schema_version 1 is older than this testbed reads \\(2\\) and no "
                                           "migration from 1 is known"):
        schema.check_schema({"schema_version": 1}, tmp_path / "manifest.json", "manifest")


@pytest.mark.parametrize("data,message", [
    ([1, 2], "expected a JSON object"),
    ({"seed": 1}, "schema_version: missing or not an integer"),
    ({"schema_version": "1"}, "schema_version: missing or not an integer"),
    ({"schema_version": True}, "schema_version: missing or not an integer"),
])
def test_malformed_version_is_an_error_naming_the_file(tmp_path: Path, data: Any, message: str) -> None:
    path = tmp_path / "metrics.json"
    with pytest.raises(TestbedError) as exc:
        schema.check_schema(data, path, "metrics")
    assert exc.value.message == f"{path}: {message}"


def test_unreadable_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_bytes(b"\xff\xfe{\x00}\x00")
    with pytest.raises(TestbedError, match="metrics.json: not UTF-8 text"):
        schema.read_versioned(path, "metrics")
    path.write_text('{"schema_version": 1,\n', encoding="utf-8")
    with pytest.raises(TestbedError, match="metrics.json:2: not valid JSON"):
        schema.read_versioned(path, "metrics")


def test_the_analysis_writes_the_metrics_version_this_reader_checks() -> None:
    assert pipeline.SCHEMA_VERSION == schema.SCHEMA_VERSION["metrics"]
