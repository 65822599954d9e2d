"""Two results bundles side by side (`testbed compare A B`): a board sweep against a virtual one, one tool version
against another, a bundle against its rerun.

Cells are matched by configuration: scenario, payload, condition (impairment, connection mode, fleet size) and
QoS, i.e. the cell minus its repeat, or by a mapping file (YAML or JSON: ``A's cell id or configuration: B's``).
Each matched configuration gets every metric the in-bundle comparisons have, with the same statistics
(orchestrator/report/tables.py: delta of mean and median, their 95 % bootstrap CIs, Welch and Mann-Whitney p,
Cliff's delta), direction B - A. What differs between the bundles' making (tool version, commit, images, host,
tool versions) is named in the report's first lines. A side whose fleet cells were loader-limited (their loader fell
behind: analysis/fleetlag.py) is flagged beside its figures (``limited_a`` / ``limited_b``). Written to the output
folder: comparisons.csv, report.md, report.html.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.analysis import stats
from orchestrator.errors import TestbedError
from orchestrator.model.layout import COMPARISONS, REPORT_HTML, REPORT_MD
from orchestrator.model.yamlfile import read_yaml
from orchestrator.report import fleet
from orchestrator.report.document import Block, CellText, Heading, Link, Paragraph, Table, render_html, render_markdown
from orchestrator.report.loader import Bundle, Cell, load_bundle
from orchestrator.report.options import bootstrap_seed
from orchestrator.report.rerun import rerun_sentence
from orchestrator.report.sections import flatten
from orchestrator.report.tables import compare_groups
from orchestrator.report.values import NA, Row, num, pval, to_csv
from orchestrator.results.atomic import write_text_atomic

ALL_TITLE = "All compared metrics"
HEADLINE_METRICS = ("frame_len_bytes", "delay_ms", "tls_handshake_ms", "wire_bps", "loss_pct", "broker_cpu_s")
RENAMED = {"baseline": "config_a", "scenario": "config_b", "repeats_baseline": "repeats_a",
           "repeats_scenario": "repeats_b", "n_baseline": "n_a", "n_scenario": "n_b", "baseline_mean": "mean_a",
           "scenario_mean": "mean_b", "baseline_median": "median_a", "scenario_median": "median_b",
           "baseline_repeat_sd": "repeat_sd_a", "scenario_repeat_sd": "repeat_sd_b"}
COLUMNS = ("config_a", "config_b", "payload", "impairment", "connection", "metric", "unit", "samples", "repeats_a",
           "repeats_b", "n_a", "n_b", "mean_a", "mean_b", "delta_mean", "delta_mean_pct", "ci95_mean_low",
           "ci95_mean_high", "median_a", "median_b", "delta_median", "delta_median_pct", "ci95_median_low",
           "ci95_median_high", "welch_p", "mannwhitney_p", "cliffs_delta", "cliffs_magnitude", "repeat_sd_a",
           "repeat_sd_b", "bootstrap_seed", "bootstrap_resamples", "limited_a", "limited_b")
# what names how a bundle was made: compared key by key, the differences named first in the report
PROVENANCE = ("tool_version", "git_commit", "git_dirty", "git", "plan.publisher", "environment")
_REPEAT = re.compile(r"-r\d+$")


@dataclass(frozen=True)
class Config:
    """A cell's configuration: what it measured, without the repeat."""

    scenario: str
    payload: int
    condition: str
    qos: int | None

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.payload} B {self.condition}" + ("" if self.qos is None else f" qos {self.qos}")

    @property
    def order(self) -> tuple[int, str, str, int]:
        """Reports list configurations by payload, condition, scenario, QoS (unknown QoS first)."""
        return (self.payload, self.condition, self.scenario, -1 if self.qos is None else self.qos)


def config_of(cell: Cell, manifest: dict[str, Any]) -> Config:
    """The cell's configuration; QoS from the cell's spec, else the sweep plan's."""
    payload, condition, scenario = cell.group
    qos = (cell.record.spec or {}).get("qos")
    if not isinstance(qos, int):
        plan = manifest.get("plan")
        qos = plan.get("qos") if isinstance(plan, dict) else None
    return Config(scenario, payload, condition, qos if isinstance(qos, int) and not isinstance(qos, bool) else None)


def configurations(bundle: Bundle) -> dict[Config, list[Cell]]:
    """The finished cells of ``bundle`` by configuration, repeats in order."""
    out: dict[Config, list[Cell]] = {}
    for cell in sorted(bundle.ok_cells, key=lambda c: (c.record.repeat, c.record.cell_id)):
        out.setdefault(config_of(cell, bundle.manifest), []).append(cell)
    return out


@dataclass(frozen=True)
class Matching:
    pairs: list[tuple[Config, Config]]
    only_a: list[Config]
    only_b: list[Config]


def _resolve(text: str, bundle: Bundle, configs: dict[Config, list[Cell]], where: str) -> Config:
    """A mapping entry: a cell id of ``bundle`` (its repeat suffix optional) or a configuration's label."""
    for config, cells in configs.items():
        if text == config.label or any(text in (c.record.cell_id, _REPEAT.sub("", c.record.cell_id)) for c in cells):
            return config
    raise TestbedError(f"{where}: {text!r} is neither a finished cell nor a configuration of {bundle.root}",
                       hint="use a cell id (runs/<cell>) or a label such as 'tls 65 B none qos 0'")


def read_mapping(path: Path) -> dict[str, str]:
    """The mapping file: {A's cell id or configuration: B's}."""
    data, _ = read_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise TestbedError(f"{path}: a mapping file maps A's cell ids or configurations to B's "
                           "(one 'a: b' per line)")
    return data


def match(a: Bundle, b: Bundle, mapping: dict[str, str] | None = None, source: str = "mapping") -> Matching:
    """Configurations found in both bundles (or paired by ``mapping``), and those in one only."""
    ca, cb = configurations(a), configurations(b)
    if mapping is None:
        pairs = [(c, c) for c in sorted(ca.keys() & cb.keys(), key=lambda c: c.order)]
    else:
        pairs = [(_resolve(ka, a, ca, source), _resolve(kb, b, cb, source)) for ka, kb in mapping.items()]
    used_a, used_b = {p[0] for p in pairs}, {p[1] for p in pairs}
    return Matching(pairs, sorted(set(ca) - used_a, key=lambda c: c.order),
                    sorted(set(cb) - used_b, key=lambda c: c.order))


def limited_of(cells: Sequence[Cell]) -> str | None:
    """A configuration's fleet verdicts over its cells: "loader-limited" when any cell's loader fell behind,
    "broker-limited" likewise, "none" when judged and neither; None when no cell could be judged (no fleet)."""
    found = [got for c in cells if (got := fleet.limits(c)) is not None
             and (got.get("loader") is not None or got.get("broker") is not None)]
    if not found:
        return None
    labels = sorted({label for got in found for label in got.get("labels") or []}, reverse=True)
    return "; ".join(labels) or "none"


def bundle_comparison_rows(a: Bundle, b: Bundle, matching: Matching, *, seed: int, resamples: int) -> list[Row]:
    """Every metric of every matched configuration, B - A, with the in-bundle comparisons' statistics, and each
    side's loader-limited / broker-limited verdicts (``limited_a``, ``limited_b``)."""
    ca, cb = configurations(a), configurations(b)
    rows: list[Row] = []
    for conf_a, conf_b in matching.pairs:
        flags = {"limited_a": limited_of(ca[conf_a]), "limited_b": limited_of(cb[conf_b])}
        for row in compare_groups((conf_a.payload, conf_a.condition), (conf_a.label, conf_b.label),
                                  (ca[conf_a], cb[conf_b]), seed=seed, resamples=resamples):
            rows.append({**{RENAMED.get(k, k): v for k, v in row.items()}, **flags})
    return rows


def limited_lines(a: Bundle, b: Bundle, matching: Matching) -> list[Block]:
    """The compared cells whose loader fell behind, named: their figures are the loader's as much as the broker's."""
    ca, cb = configurations(a), configurations(b)
    named_cells = [f"{side}: {fleet.marked(c)}" for side, configs, which in (("A", ca, 0), ("B", cb, 1))
                   for pair in matching.pairs for c in configs[pair[which]] if fleet.loader_limited(c)]
    if not named_cells:
        return []
    return [Paragraph(f"Loader-limited cells among those compared ({'; '.join(dict.fromkeys(named_cells))}): "
                      f"{fleet.LOADER_LIMITED}. A delta involving them says as much about the loader as about what "
                      "changed.")]


# ---------------------------------------------------------------- how the bundles were made
def provenance(manifest: dict[str, Any]) -> dict[str, str]:
    """The manifest's keys that say how the bundle was made, flattened (environment.image_digests.broker, ...)."""
    picked: dict[str, Any] = {}
    for key in PROVENANCE:
        node: Any = manifest
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            picked[key] = node
    return {k: NA if v is None else str(v) for k, v in flatten(picked)}


def differences(a: Bundle, b: Bundle) -> list[tuple[str, str, str]]:
    """(key, A's value, B's value) of every provenance key whose values differ (missing on one side: n/a)."""
    pa, pb = provenance(a.manifest), provenance(b.manifest)
    return [(k, pa.get(k, NA), pb.get(k, NA)) for k in sorted(pa.keys() | pb.keys()) if pa.get(k) != pb.get(k)]


# the groups a difference is named by in the first lines, most telling first: (key prefix, name)
GROUPS = (("tool_version", "tool version"), ("git", "git commit"), ("plan.publisher", "publisher"),
          ("environment.image_digests.", "images"), ("environment.images_from", "images"),
          ("environment.versions.", "versions in the images"),
          ("environment.host.", "host"), ("environment.", ""))


def named(keys: Iterable[str]) -> str:
    """The differing keys in words: 'tool version, images (broker, publisher), host (kernel), mbedtls'."""
    parts: dict[str, list[str]] = {}
    for key in keys:
        prefix, name = next(((p, n) for p, n in GROUPS if key.startswith(p)), ("", key))
        rest = key.removeprefix(prefix) if prefix.endswith(".") else ""
        parts.setdefault(name or rest, []).extend([rest] if name and rest else [])
    order = [n for _, n in GROUPS if n]
    ranked = sorted(parts, key=lambda n: (order.index(n) if n in order else len(order), n))
    return ", ".join(n + (f" ({', '.join(dict.fromkeys(parts[n]))})" if parts[n] else "") for n in ranked)


def _first_lines(a: Bundle, b: Bundle, diffs: Sequence[tuple[str, str, str]]) -> list[Block]:
    intro = (f"A = {a.root.name}, B = {b.root.name}. Every delta is B - A, with A's bootstrap seed; the statistics "
             "are those of the in-bundle comparisons.") + rerun_sentence(a, b)
    if not diffs:
        return [Paragraph(intro + " The manifests record the same tool version, commit, images, host and tool "
                                  "versions.")]
    return [Paragraph(f"{intro} Made differently: {named(k for k, _, _ in diffs)}."),
            Table(("recorded in the manifest", "A", "B"), tuple(diffs), "What differs between the bundles' making")]


# ---------------------------------------------------------------- the report
def _delta_text(row: Row, digits: int) -> str:
    text = f"{num(row['delta_median'], digits, True)} {row['unit']}"
    if row["ci95_median_low"] is not None:
        text += f" ({num(row['ci95_median_low'], digits, True)} .. {num(row['ci95_median_high'], digits, True)})"
    return text


def found_limited(found: dict[str, Row], key: str) -> str | None:
    return next((r[key] for r in found.values() if r.get(key)), None)


def headline(rows: Sequence[Row], matching: Matching) -> Table:
    """One line per matched configuration: the change of the headline metrics' medians, with their 95 % CI."""
    by_pair: dict[tuple[str, str], dict[str, Row]] = {}
    for row in rows:
        by_pair.setdefault((row["config_a"], row["config_b"]), {})[row["metric"]] = row
    lines: list[tuple[CellText, ...]] = []
    for conf_a, conf_b in matching.pairs:
        found = by_pair.get((conf_a.label, conf_b.label), {})
        label = conf_a.label if conf_a == conf_b else f"{conf_a.label} -> {conf_b.label}"
        flags = [f"{side}: loader-limited" for side, value in (("A", found_limited(found, "limited_a")),
                                                                ("B", found_limited(found, "limited_b")))
                 if value and "loader-limited" in value]
        cells: list[CellText] = [label + (f" ({', '.join(flags)})" if flags else "")]
        for name in HEADLINE_METRICS:
            got = found.get(name)
            cells.append(NA if got is None or got["delta_median"] is None
                         else Link(_delta_text(got, 0 if got["unit"] in ("B", "bit/s") else 3), ALL_TITLE))
        effect = found.get("delay_ms")
        cells.append(NA if effect is None or effect["cliffs_delta"] is None
                     else Link(f"{effect['cliffs_magnitude']} ({effect['cliffs_delta']:+.2f})", ALL_TITLE))
        lines.append(tuple(cells))
    columns = ("configuration", "bytes per PUBLISH", "median one-way delay", "TLS handshake", "wire throughput",
               "loss", "broker CPU", "delay effect (Cliff's delta)")
    return Table(columns, tuple(lines), "B - A: change of the median (95 % CI); n/a: not measured on both sides")


def _all_line(r: Row) -> tuple[str, ...]:
    ci = (NA if r["ci95_mean_low"] is None
          else f"{num(r['ci95_mean_low'], 3, True)} .. {num(r['ci95_mean_high'], 3, True)}")
    cliff = NA if r["cliffs_delta"] is None else f"{r['cliffs_delta']:+.3f} ({r['cliffs_magnitude']})"
    return (r["config_a"] if r["config_a"] == r["config_b"] else f"{r['config_a']} -> {r['config_b']}",
            f"{r['metric']} ({r['unit']})", num(r["mean_a"]), num(r["mean_b"]),
            f"{num(r['delta_mean'], 3, True)} ({num(r['delta_mean_pct'], 2, True)} %)", ci,
            f"{num(r['delta_median'], 3, True)} ({num(r['delta_median_pct'], 2, True)} %)", pval(r["welch_p"]),
            pval(r["mannwhitney_p"]), cliff)


def _only(matching: Matching, a: Bundle, b: Bundle) -> list[Block]:
    ca, cb = configurations(a), configurations(b)
    rows = [("A only", c.label, " ".join(x.record.cell_id for x in ca[c])) for c in matching.only_a]
    rows += [("B only", c.label, " ".join(x.record.cell_id for x in cb[c])) for c in matching.only_b]
    unfinished = [(side, c.record.cell_id, c.record.status) for side, bundle in (("A", a), ("B", b))
                  for c in bundle.excluded_cells]
    blocks: list[Block] = [Heading(2, "Cells in one bundle only")]
    blocks.append(Table(("bundle", "configuration", "cells"), tuple(rows)) if rows
                  else Paragraph("None: every finished configuration is in both bundles."))
    if unfinished:
        blocks.append(Table(("bundle", "cell", "status"), tuple(unfinished), "Cells that did not finish (left out)"))
    return blocks


def build_comparison_document(a: Bundle, b: Bundle, matching: Matching, rows: Sequence[Row]) -> list[Block]:
    diffs = differences(a, b)
    matched = tuple((ca.label, cb.label, str(len(configurations(a)[ca])), str(len(configurations(b)[cb])))
                    for ca, cb in matching.pairs)
    return [
        Heading(1, f"Bundle comparison: {a.root.name} vs {b.root.name}"),
        *_first_lines(a, b, diffs),
        Heading(2, "What changed from A to B"),
        headline(rows, matching) if matching.pairs else Paragraph("No configuration is in both bundles."),
        *limited_lines(a, b, matching),
        Heading(2, "Matched configurations"),
        Table(("configuration in A", "in B", "cells in A", "cells in B"), matched) if matched
        else Paragraph("None."),
        *_only(matching, a, b),
        Heading(2, ALL_TITLE),
        Table(("configuration", "metric", "A mean", "B mean", "delta mean (%)", "95 % CI of delta mean",
               "delta median (%)", "Welch p", "Mann-Whitney p", "Cliff's delta"),
              tuple(_all_line(r) for r in rows), f"B - A (all columns and the CI of the median in {COMPARISONS})"),
    ]


def compare_bundles(a_dir: Path, b_dir: Path, out: Path, *, mapping: Path | None = None,
                    resamples: int = stats.DEFAULT_RESAMPLES) -> list[Path]:
    """Compare bundle B with bundle A into ``out``; returns the files written."""
    a, b = load_bundle(Path(a_dir)), load_bundle(Path(b_dir))
    matching = match(a, b, read_mapping(mapping) if mapping else None, str(mapping))
    rows = bundle_comparison_rows(a, b, matching, seed=bootstrap_seed(a.manifest), resamples=resamples)
    blocks = build_comparison_document(a, b, matching, rows)
    out.mkdir(parents=True, exist_ok=True)
    return [write_text_atomic(out / COMPARISONS, to_csv(rows, COLUMNS)),
            write_text_atomic(out / REPORT_MD, render_markdown(blocks)),
            write_text_atomic(out / REPORT_HTML, render_html(blocks, f"{a.root.name} vs {b.root.name}"))]
