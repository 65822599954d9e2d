"""Everything the CLI draws (rich): progress bars, the run and sweep summaries, doctor and status tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from orchestrator.cli.console import err, out
from orchestrator.doctor.checks import Check
from orchestrator.measure.run import RunOutcome
from orchestrator.model.axes import AXES, NO_IMPAIRMENT
from orchestrator.model.ciphers import by_code
from orchestrator.model.layout import BundleLayout, Layout
from orchestrator.model.run import RunSpec
from orchestrator.report.impairment import mechanism_label
from orchestrator.results.atomic import read_json


@contextmanager
def run_bar(total: int) -> Iterator[tuple[Callable[[int, int], None], Callable[[str], None]]]:
    """A run's messages bar while the block runs: the (progress, status) callbacks the run reports to."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("messages", total=total)
        yield (lambda n, _total: bar.update(task, completed=n)), (lambda m: bar.console.print(f"[dim]{m}[/]"))


def run_outcome(spec: RunSpec, outcome: RunOutcome) -> None:
    """The run's summary (when it was analysed) and where its folder is."""
    if outcome.metrics:
        out.print(run_summary(spec, outcome.metrics, outcome.run_dir))
    out.print(f"run folder: {outcome.run_dir}  status: {outcome.status}")


def run_summary(spec: RunSpec, metrics: dict[str, Any], run_dir: Path) -> Table:
    """The run's headline metrics; an impaired run also says what made its delay (from its cell.json)."""
    table = summary_table(metrics, title=f"{spec.scenario}, {spec.payload} B x {spec.samples}")
    if spec.impairment != NO_IMPAIRMENT:
        state = read_json(Layout(run_dir).cell).get("impairment_state")
        table.add_row(f"delay mechanism ({spec.impairment})", mechanism_label(state))
    return table


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_table(m: dict[str, Any], title: str) -> Table:
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    d = m.get("delay_ms") or {}
    tls = m.get("tls") or {}
    rows = [
        ("negotiated", f"{tls.get('version') or 'plaintext'} {tls.get('cipher_suite') or ''}".strip()),
        ("delay median / p95 (ms)", f"{fmt(d.get('median'))} / {fmt(d.get('p95'))}"),
        ("delay mean [95% CI] (ms)", f"{fmt(d.get('mean'))} [{fmt(d.get('ci95_low'))}, {fmt(d.get('ci95_high'))}]"),
        ("broker transit median (ms)", fmt((m.get("broker_transit_ms") or {}).get("median"))),
        ("uplink median (ms)", fmt((m.get("uplink_ms") or {}).get("median"))),
        ("jitter (ms)", fmt((m.get("jitter_ms") or {}).get("mean_abs_diff"))),
        ("throughput / goodput (bit/s)", f"{fmt((m.get('throughput') or {}).get('wire_bps'), 1)} / "
                                         f"{fmt((m.get('throughput') or {}).get('goodput_bps'), 1)}"),
        ("loss (%)", fmt((m.get("loss") or {}).get("loss_pct"), 2)),
        ("TLS overhead per PUBLISH (B)", fmt((m.get("overhead_bytes") or {}).get("tls_overhead"))),
        ("frame per PUBLISH (B)", fmt((m.get("overhead_bytes") or {}).get("frame_len"))),
        ("TLS handshake (ms)", fmt((m.get("handshake") or {}).get("tls_handshake_ms"))),
    ]
    for k, v in rows:
        t.add_row(k, v)
    return t


class RichSweepProgress:
    """Cells bar with ETA over the whole sweep, plus the current cell's messages."""

    def __init__(self, bar: Progress, total_cells: int) -> None:
        self.bar = bar
        self.cells = bar.add_task("cells", total=total_cells)
        self.msgs = bar.add_task("messages", total=1)
        self.results: list[tuple[str, str, str | None]] = []

    def cell_started(self, index: int, total: int, cell: Any, expected_s: float) -> None:
        self.bar.update(self.cells, description=f"cell {index}/{total} {cell.cell_id}")
        self.bar.reset(self.msgs, total=1, completed=0)

    def messages(self, received: int, expected: int) -> None:
        self.bar.update(self.msgs, total=expected, completed=received)

    def cell_finished(self, cell: Any, status: str, error: str | None) -> None:
        self.bar.advance(self.cells)
        colour = {"ok": "green", "failed": "red"}.get(status, "yellow")
        self.bar.console.print(f"[{colour}]{status}[/] {cell.cell_id}" + (f": {error}" if error else ""),
                               highlight=False)
        self.results.append((cell.cell_id, status, error))

    def note(self, message: str) -> None:
        self.bar.console.print(f"[dim]{message}[/]", highlight=False)


def sweep_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=err, transient=True)


def sweep_summary(bundle: Path) -> Table:
    t = Table(title=f"sweep {bundle.name}")
    for col in ("cell", "status", "suite", "delay median ms", "loss %", "TLS B/msg", "wire bit/s", "delay mech"):
        t.add_column(col, no_wrap=col == "cell")
    layout = BundleLayout(bundle)
    order = read_json(layout.manifest).get("cell_order") or []
    run_dirs = sorted(layout.runs.glob("*"),
                      key=lambda p: (order.index(p.name) if p.name in order else len(order), p.name))
    for run_dir in run_dirs:
        cell = read_json(Layout(run_dir).cell)
        m = read_json(Layout(run_dir).metrics)
        tls = m.get("tls") or {}
        suite = by_code(int(tls["cipher_suite_id"], 16)) if tls.get("cipher_suite_id") else None
        t.add_row(run_dir.name, str(cell.get("status", "?")),
                  suite.openssl if suite else ("plaintext" if m else "n/a"),
                  fmt((m.get("delay_ms") or {}).get("median")), fmt((m.get("loss") or {}).get("loss_pct"), 2),
                  fmt((m.get("overhead_bytes") or {}).get("tls_overhead")),
                  fmt((m.get("throughput") or {}).get("wire_bps"), 1), _mechanism(cell))
    return t


def _mechanism(cell: dict[str, Any]) -> str:
    """The cell's delay mechanism as its impairment.json recorded it; '-' for a cell without impairment."""
    if AXES.is_default(cell, "impairment"):
        return "-"
    return mechanism_label(cell.get("impairment_state"))


def doctor_table(checks: Sequence[Check]) -> Table:
    table = Table(title="testbed doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")  # paths and commands in full, never cut with an ellipsis
    for c in checks:
        status = "[green]ok[/]" if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]optional[/]")
        if c.skipped:
            status = "[red]SKIPPED[/]" if c.required else "[yellow]skipped[/]"
        table.add_row(c.name, status, c.detail, "" if c.ok else c.fix)
    return table


def status_table(rows: Sequence[Sequence[str]]) -> Table:
    table = Table()
    for col in ("service", "container", "state", "health", "ports"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    return table
