"""analysis/grading.py: the shipped tables, band edges, overall index, user tables and their errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.analysis import grading
from orchestrator.errors import TestbedError


def _metrics(delay: float | None = 1.0, jitter: float | None = 0.1, loss: float | None = 0.0,
             p99: float | None = 2.0) -> dict[str, Any]:
    return {"delay_ms": {"available": delay is not None, "mean": delay, "p99": p99},
            "jitter_ms": {"mean_abs_diff": jitter, "std": jitter},
            "loss": {"loss_pct": loss}}


def _tiphon(**kwargs: float | None) -> grading.Grade:
    return grading.grade(grading.builtin_table("tiphon"), _metrics(**kwargs))


def _index_of(result: grading.Grade, name: str) -> int | None:
    assert isinstance(result, grading.IndexGrade)
    return next(c.index for c in result.criteria if c.name == name)


def test_builtin_tables_carry_source_and_caveat() -> None:
    tables = {t.name: t for t in grading.builtin_tables()}
    assert set(tables) == {"tiphon", "g1010"}
    for table in tables.values():
        assert "secondary" in table.source.lower()
        assert table.caveat.strip()
    assert isinstance(tables["tiphon"], grading.IndexTable)
    assert isinstance(tables["g1010"], grading.PassFailTable)


@pytest.mark.parametrize(("delay", "index"), [
    (0.6, 4), (149.99, 4), (150.0, 3), (299.9, 3), (300.0, 2), (449.9, 2), (450.0, 1), (5000.0, 1),
])
def test_tiphon_delay_bands(delay: float, index: int) -> None:
    assert _index_of(_tiphon(delay=delay), "delay") == index


@pytest.mark.parametrize(("jitter", "index"), [
    (0.0, 4), (0.001, 3), (74.9, 3), (75.0, 2), (125.0, 1), (300.0, 1),
])
def test_tiphon_jitter_bands(jitter: float, index: int) -> None:
    assert _index_of(_tiphon(jitter=jitter), "jitter") == index


@pytest.mark.parametrize(("loss", "index"), [(0.0, 4), (2.9, 4), (3.0, 3), (14.9, 3), (15.0, 2), (25.0, 1)])
def test_tiphon_loss_bands(loss: float, index: int) -> None:
    assert _index_of(_tiphon(loss=loss), "loss") == index


@pytest.mark.parametrize(("delay", "jitter", "loss", "overall", "label"), [
    (1.0, 0.0, 0.0, 4.0, "very satisfying (sangat memuaskan)"),    # 4,4,4
    (1.0, 0.5, 0.0, 11 / 3, "satisfying (memuaskan)"),               # 4,3,4
    (200.0, 80.0, 0.0, 3.0, "satisfying (memuaskan)"),               # 3,2,4
    (350.0, 100.0, 20.0, 2.0, "less satisfying (kurang memuaskan)"),  # 2,2,2
    (500.0, 200.0, 30.0, 1.0, "poor (jelek)"),                       # 1,1,1
])
def test_tiphon_overall_index_is_mean_of_indices(delay: float, jitter: float, loss: float,
                                                 overall: float, label: str) -> None:
    result = grading.grade(grading.builtin_table("tiphon"), _metrics(delay=delay, jitter=jitter, loss=loss))
    assert isinstance(result, grading.IndexGrade)
    assert result.overall_index == pytest.approx(overall)
    assert result.overall_label == label


def test_unavailable_or_negative_delay_gets_no_grade() -> None:
    table = grading.builtin_table("tiphon")
    missing = grading.grade(table, _metrics(delay=None))
    assert isinstance(missing, grading.IndexGrade)
    assert _index_of(missing, "delay") is None
    assert missing.overall_index is None and missing.overall_label is None
    assert _index_of(grading.grade(table, _metrics(delay=-0.2)), "delay") is None


@pytest.mark.parametrize(("p99", "loss", "verdict"), [
    (1.0, 0.0, "pass"), (249.9, 0.0, "pass"), (250.0, 0.0, "fail"), (1.0, 0.5, "fail"),
    (None, 0.0, "n/a"), (None, 1.0, "fail"),
])
def test_g1010_command_control(p99: float | None, loss: float, verdict: str) -> None:
    result = grading.grade(grading.builtin_table("g1010"), _metrics(p99=p99, loss=loss))
    assert isinstance(result, grading.PassFailGrade)
    assert result.verdict == verdict


def test_metric_value_refuses_non_numbers() -> None:
    metrics = {"delay_ms": {"mean": True, "p99": float("nan"), "median": "3"}}
    assert grading.metric_value(metrics, "delay_ms.mean") is None
    assert grading.metric_value(metrics, "delay_ms.p99") is None
    assert grading.metric_value(metrics, "delay_ms.median") is None
    assert grading.metric_value(metrics, "loss.loss_pct") is None
    assert grading.metric_value({"loss": {"loss_pct": 0}}, "loss.loss_pct") == 0.0


def _user_table() -> dict[str, Any]:
    return {
        "schema_version": 1, "kind": "index", "name": "lab", "title": "Lab table",
        "source": "our lab's own targets", "caveat": "made up for a test",
        "criteria": {"delay": {"metric": "delay_ms.median", "unit": "ms", "bands": [
            {"index": 2, "label": "fast", "upper": 1.0}, {"index": 1, "label": "slow", "upper": None}]}},
        "overall": [{"label": "bad", "upper": 1.5}, {"label": "good", "upper": None}],
    }


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_user_table_loads_and_grades(tmp_path: Path) -> None:
    table = grading.load_table(_write(tmp_path, _user_table()))
    result = grading.grade(table, {"delay_ms": {"median": 0.7}})
    assert isinstance(result, grading.IndexGrade)
    assert (result.overall_index, result.overall_label) == (2.0, "good")


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d["criteria"]["delay"]["bands"][0].update(colour="red"), "criteria.delay.bands.0.colour"),
    (lambda d: d["criteria"]["delay"].update(metric="delay_ms.average"), "criteria.delay.metric"),
    (lambda d: d.pop("source"), "source"),
    (lambda d: d["criteria"]["delay"]["bands"].reverse(), "criteria.delay"),
    (lambda d: d["overall"][-1].update(upper=9), "overall"),
    (lambda d: d.update(kind="stars"), "kind"),
])
def test_invalid_user_table_error_names_file_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    data = _user_table()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(TestbedError) as info:
        grading.load_table(path)
    assert str(path) in info.value.message
    assert field in info.value.message


def test_newer_table_schema_refused(tmp_path: Path) -> None:
    data = _user_table() | {"schema_version": 2}
    with pytest.raises(TestbedError, match="newer"):
        grading.load_table(_write(tmp_path, data))


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("schema_version: 1\nkind: [index\n", encoding="utf-8")
    with pytest.raises(TestbedError, match=r"broken\.yaml:\d+"):
        grading.load_table(path)


def test_missing_table_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match="cannot read grading table"):
        grading.load_table(tmp_path / "absent.yaml")
    with pytest.raises(TestbedError, match="unknown grading table"):
        grading.builtin_table("mos")
