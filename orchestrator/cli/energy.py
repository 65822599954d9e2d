"""`testbed energy`: what TLS costs the battery (docs/energy.md). `model` prints a run's modelled energy per reading and
battery life; `import` aligns a power trace (PPK2, Otii, CSV) to the run and measures it; `synth` writes a
synthetic trace with known truth for a run (the import's test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from orchestrator.cli.console import out
from orchestrator.errors import TestbedError

app = typer.Typer(no_args_is_help=True, help="Energy per reading and battery life: modelled, or from a power trace.")

Run = Annotated[Path, typer.Argument(help="a run folder (runs/<cell>/ of a bundle)", exists=True, file_okay=False)]
ModelFile = Annotated[Path | None, typer.Option("--energy-model", help="a YAML replacing the built-in ESP32 model "
                                                "(orchestrator/analysis/esp32_energy.yaml), every parameter sourced")]


def _model_table(block: dict[str, Any]) -> Table:
    t = Table(title=f"energy per reading, MODELLED ({block['model']}; {block['capacity_mah']:g} mAh, one reading "
                    f"every {block['interval_s']:g} s; radio power save {block['power_save']})")
    for col in ("mode", "K", "sleep between connections", "mJ / reading (modelled)", "battery days (modelled)"):
        t.add_column(col)
    for r in block["rows"]:
        t.add_row(r["mode"], f"{r['per_connection']:g}", r["sleep"] + (" (the cell's)" if r["ran"] else ""),
                  f"{r['per_reading_mj']:.3f}",
                  f"{r['battery_life_days']:.1f}")
    return t


@app.command("model")
def model_cmd(
    run: Run,
    energy_model: ModelFile = None,
    capacity: Annotated[float | None, typer.Option(help="battery capacity, mAh (default: the model's input)")] = None,
    interval: Annotated[float | None, typer.Option(help="seconds between readings (default: the model's input)")
                        ] = None,
    power_save: Annotated[str | None, typer.Option(help="the radio's power save while connected: none, modem-sleep "
                                                        "(default: the cell's)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the figures and every source as JSON")] = False,
) -> None:
    """The run's modelled energy per reading and battery life, per connection kind and sleep mode."""
    from orchestrator.analysis.energymodel import load_energy_model
    from orchestrator.runanalysis.energy import modelled, run_facts

    if capacity is not None and capacity <= 0 or interval is not None and interval <= 0:
        raise TestbedError("--capacity and --interval must be above 0")
    block = modelled(run_facts(run), load_energy_model(energy_model), capacity_mah=capacity, interval_s=interval,
                     power_save=power_save)
    if as_json:
        out.print_json(json.dumps(block))
        return
    out.print(_model_table(block))
    out.print(block["note"])
    for key, source in block["sources"].items():
        out.print(f"  {key}: {source}", highlight=False, markup=False)


@app.command("import")
def import_cmd(
    run: Run,
    trace: Annotated[Path, typer.Argument(help="the instrument's CSV export", exists=True, dir_okay=False)],
    fmt: Annotated[str, typer.Option("--format", help="ppk2, otii or csv")],
    no_marker: Annotated[bool, typer.Option("--no-marker", help="align by the current's steps, not the marker")
                         ] = False,
    marker_channel: Annotated[str | None, typer.Option(help="the digital channel the firmware drives (PPK2: D0..D7; "
                                                            "Otii: its column name)")] = None,
    start: Annotated[float | None, typer.Option(help="without a marker: the trace's first sample on the run's "
                                                     "clock (epoch s, e.g. from the serial log)")] = None,
    start_error: Annotated[float, typer.Option(help="how far off --start may be, s")] = 1.0,
    voltage: Annotated[float | None, typer.Option(help="the supply voltage, V (default: the model's)")] = None,
    energy_model: ModelFile = None,
) -> None:
    """Align TRACE to the run's events and write energy.json: energy per phase and per reading, measured."""
    from orchestrator.runanalysis.energyimport import import_trace

    result = import_trace(run, trace, fmt, marker=not no_marker, marker_channel=marker_channel, start=start,
                          start_error_s=start_error, voltage=voltage, model_path=energy_model)
    al, m = result["alignment"], result["measured"]
    out.print(f"read {result['trace']['samples']} samples, header {result['trace']['header']!r} ({fmt})",
              highlight=False, markup=False)
    out.print(f"aligned by {al['method']}: drift {al['drift_ppm']:+.1f} ppm, error bound {al['error_bound_ms']:.3f} ms")
    t = Table(title="energy per phase, MEASURED")
    for col in ("phase", "s", "mJ"):
        t.add_column(col)
    for name, v in m["phases"].items():
        t.add_row(name, f"{v['seconds']:.3f}", f"{v['mj']:.3f}")
    out.print(t)
    out.print(f"per reading: {m['per_reading_mj']:.3f} mJ measured; model error "
              f"{result['model_error'].get('per_reading_error_pct', 'n/a')} % (modelled vs measured)")
    out.print(f"written: {run / 'energy.json'}")


@app.command("synth")
def synth_cmd(
    run: Run,
    out_dir: Annotated[Path, typer.Option("--out", help="folder for the traces and truth.json")] = Path("."),
    drift_ppm: Annotated[float, typer.Option(help="the instrument clock's drift against the run's")] = 150.0,
    rate: Annotated[float, typer.Option(help="samples per second")] = 10_000.0,
    seed: Annotated[int, typer.Option(help="the noise's seed")] = 0,
) -> None:
    """Write a synthetic trace of RUN with known truth: ppk2.csv, otii.csv and truth.json in --out."""
    from orchestrator.analysis.synthtrace import SynthSpec, synthesize, write_otii, write_ppk2
    from orchestrator.runanalysis.energy import run_facts
    from orchestrator.runanalysis.energyimport import run_connections

    syn = synthesize(run_connections(run), run_facts(run).readings,
                     SynthSpec(rate_hz=rate, drift_ppm=drift_ppm, seed=seed))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_ppk2(syn.trace, out_dir / "ppk2.csv")
    write_otii(syn.trace, out_dir / "otii.csv")
    (out_dir / "truth.json").write_text(json.dumps(syn.truth, indent=2) + "\n", encoding="utf-8")
    out.print(f"wrote {out_dir / 'ppk2.csv'}, {out_dir / 'otii.csv'} and {out_dir / 'truth.json'} "
              f"({syn.trace.time_s.size} samples)")
