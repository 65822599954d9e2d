"""QoS grades of one run from threshold tables kept as data (orchestrator/grading/*.yaml).

Two kinds of table:
- ``index``: each criterion maps a metric to an index through ordered bands (TIPHON); the
  overall index is the mean of the criteria's indices, as QoS theses compute it, and gets a
  label from the ``overall`` bands;
- ``pass_fail``: each requirement compares a metric with a threshold (G.1010 command/control).

A band holds values below ``upper`` (or equal to it with ``upper_inclusive``) that no earlier
band holds; the last band has ``upper: null`` and holds the rest. A missing or negative metric
value gets no grade (None), never a number. Users pass their own table files: they are
validated with the same models and errors name the file and the field; every limit and threshold is a finite
number (a NaN one would compare false with every value).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from orchestrator.errors import TestbedError
from orchestrator.model.yamlfile import Finite, error_text, read_yaml

TABLE_SCHEMA_VERSION = 1
BUILTIN_TABLES = ("tiphon", "g1010")

# Values of metrics.json (dotted paths) a table may grade.
MetricPath = Literal[
    "delay_ms.mean", "delay_ms.median", "delay_ms.p95", "delay_ms.p99", "delay_ms.max",
    "broker_transit_ms.mean", "broker_transit_ms.median", "broker_transit_ms.p95", "broker_transit_ms.p99",
    "jitter_ms.mean_abs_diff", "jitter_ms.std",
    "loss.loss_pct",
    "throughput.wire_bps", "throughput.goodput_bps",
    "study_compatible.mean_interarrival_ms", "study_compatible.throughput_bps", "study_compatible.loss_pct",
    "handshake.tcp_connect_ms", "handshake.tls_handshake_ms", "handshake.mqtt_connect_ms",
]


class _Strict(Finite):  # every threshold and band limit finite (a NaN one compares false with every value)
    model_config = ConfigDict(extra="forbid", frozen=True)


class Band(_Strict):
    index: int = Field(ge=0)
    label: str = Field(min_length=1)
    upper: float | None
    upper_inclusive: bool = False


class OverallBand(_Strict):
    label: str = Field(min_length=1)
    upper: float | None
    upper_inclusive: bool = False


def _check_bands(bands: list[Any], what: str) -> None:
    if not bands:
        raise ValueError(f"{what}: at least one band is needed")
    if bands[-1].upper is not None:
        raise ValueError(f"{what}: the last band must have upper: null (it holds every larger value)")
    uppers = [b.upper for b in bands[:-1]]
    if any(u is None for u in uppers):
        raise ValueError(f"{what}: only the last band may have upper: null")
    if any(b <= a for a, b in zip(uppers, uppers[1:], strict=False)):  # type: ignore[operator]
        raise ValueError(f"{what}: band upper limits must increase strictly, got {uppers}")


class Criterion(_Strict):
    metric: MetricPath
    unit: str
    note: str | None = None
    bands: list[Band]

    @model_validator(mode="after")
    def _bands_ordered(self) -> Criterion:
        _check_bands(self.bands, "bands")
        return self


class IndexTable(_Strict):
    schema_version: Literal[1]
    kind: Literal["index"]
    name: str = Field(min_length=1, pattern=r"^[a-z0-9_-]+$")
    title: str
    source: str = Field(min_length=1)
    caveat: str = Field(min_length=1)
    criteria: dict[str, Criterion] = Field(min_length=1)
    overall: list[OverallBand]

    @model_validator(mode="after")
    def _overall_ordered(self) -> IndexTable:
        _check_bands(self.overall, "overall")
        return self


class Requirement(_Strict):
    metric: MetricPath
    op: Literal["<", "<=", "==", ">=", ">"]
    value: float
    unit: str
    note: str | None = None


class PassFailTable(_Strict):
    schema_version: Literal[1]
    kind: Literal["pass_fail"]
    name: str = Field(min_length=1, pattern=r"^[a-z0-9_-]+$")
    title: str
    source: str = Field(min_length=1)
    caveat: str = Field(min_length=1)
    category: str
    requirements: dict[str, Requirement] = Field(min_length=1)


GradingTable = Annotated[IndexTable | PassFailTable, Field(discriminator="kind")]
_TABLE_ADAPTER: TypeAdapter[IndexTable | PassFailTable] = TypeAdapter(GradingTable)


# ---------------------------------------------------------------- loading
def _field(loc: tuple[int | str, ...]) -> str:
    if loc and loc[0] in ("index", "pass_fail"):  # the union's tag, not a field
        loc = loc[1:]
    return ".".join(str(part) for part in loc) or "(top level)"


def parse_table(data: Any, source: str) -> IndexTable | PassFailTable:
    """Validate a parsed YAML document; errors name ``source`` and the field."""
    if isinstance(data, Mapping) and isinstance(data.get("schema_version"), int) \
            and data["schema_version"] > TABLE_SCHEMA_VERSION:
        raise TestbedError(
            f"{source}: schema_version {data['schema_version']} is newer than this tool reads "
            f"({TABLE_SCHEMA_VERSION})", hint="upgrade mqtt-tls-testbed or rewrite the table")
    try:
        return _TABLE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        lines = [f"{_field(err['loc'])}: {error_text(err)}" for err in exc.errors()]
        raise TestbedError(f"{source}: invalid grading table: {lines[0]}",
                           hint="kind: index (bands) or kind: pass_fail (requirements); see "
                                "orchestrator/grading/tiphon.yaml and g1010.yaml",
                           evidence="\n".join(lines)) from None


def load_table(path: Path) -> IndexTable | PassFailTable:
    """Load a user's grading table file."""
    if not path.is_file():
        raise TestbedError(f"{path}: cannot read grading table: no such file")
    data, _lines = read_yaml(path)
    return parse_table(data, str(path))


def builtin_table(name: str) -> IndexTable | PassFailTable:
    """One of the tables shipped in orchestrator/grading/."""
    if name not in BUILTIN_TABLES:
        raise TestbedError(f"unknown grading table {name!r}; built-in: {', '.join(BUILTIN_TABLES)}")
    ref = resources.files("orchestrator.grading").joinpath(f"{name}.yaml")
    return parse_table(yaml.safe_load(ref.read_text(encoding="utf-8")), f"orchestrator/grading/{name}.yaml")


def builtin_tables() -> list[IndexTable | PassFailTable]:
    return [builtin_table(name) for name in BUILTIN_TABLES]


# ---------------------------------------------------------------- grading
def metric_value(metrics: Mapping[str, Any], path: str) -> float | None:
    """The number at dotted ``path`` in a metrics.json mapping, or None when absent/null/not finite."""
    node: Any = metrics
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        return None
    return float(node)


def _in_band(value: float, upper: float | None, inclusive: bool) -> bool:
    return upper is None or value < upper or (inclusive and value == upper)


@dataclass(frozen=True)
class CriterionGrade:
    name: str
    metric: str
    unit: str
    value: float | None
    index: int | None
    label: str | None


@dataclass(frozen=True)
class IndexGrade:
    table: str
    criteria: tuple[CriterionGrade, ...]
    overall_index: float | None   # None unless every criterion was graded
    overall_label: str | None


@dataclass(frozen=True)
class RequirementResult:
    name: str
    metric: str
    unit: str
    op: str
    threshold: float
    value: float | None
    passed: bool | None


@dataclass(frozen=True)
class PassFailGrade:
    table: str
    results: tuple[RequirementResult, ...]
    passed: bool | None           # False if any fails, None if none fails but one is unknown

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "fail", None: "n/a"}[self.passed]


Grade = IndexGrade | PassFailGrade


def grade_index(table: IndexTable, metrics: Mapping[str, Any]) -> IndexGrade:
    graded = []
    for name, crit in table.criteria.items():
        value = metric_value(metrics, crit.metric)
        band = None
        if value is not None and value >= 0:
            band = next(b for b in crit.bands if _in_band(value, b.upper, b.upper_inclusive))
        graded.append(CriterionGrade(name, crit.metric, crit.unit, value,
                                     band.index if band else None, band.label if band else None))
    indices = [g.index for g in graded if g.index is not None]
    overall = overall_label = None
    if len(indices) == len(graded):
        overall = sum(indices) / len(indices)
        overall_label = next(b.label for b in table.overall if _in_band(overall, b.upper, b.upper_inclusive))
    return IndexGrade(table.name, tuple(graded), overall, overall_label)


_OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
        ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


def grade_pass_fail(table: PassFailTable, metrics: Mapping[str, Any]) -> PassFailGrade:
    results = []
    for name, req in table.requirements.items():
        value = metric_value(metrics, req.metric)
        passed = None if value is None else bool(_OPS[req.op](value, req.value))
        results.append(RequirementResult(name, req.metric, req.unit, req.op, req.value, value, passed))
    verdicts = [r.passed for r in results]
    overall: bool | None = False if False in verdicts else (None if None in verdicts else True)
    return PassFailGrade(table.name, tuple(results), overall)


def grade(table: IndexTable | PassFailTable, metrics: Mapping[str, Any]) -> Grade:
    """Grade one run's metrics.json mapping with ``table``."""
    if isinstance(table, IndexTable):
        return grade_index(table, metrics)
    return grade_pass_fail(table, metrics)
