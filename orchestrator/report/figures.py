"""Which figures a report has and the cells each is drawn from (the drawing itself is in plots.py).

Only finished cells are plotted. Distribution plots get one series per cell; bar plots one bar per
configuration (payload, impairment, scenario), repeats averaged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from orchestrator.model.axes import NO_IMPAIRMENT
from orchestrator.model.layout import PLOTS
from orchestrator.report import plots
from orchestrator.report.document import Figure
from orchestrator.report.loader import Bundle, Cell, delay_samples
from orchestrator.report.order import cell_sort_key, group_keys, groups
from orchestrator.report.values import metric

LayerBar = tuple[str, dict[str, float]]
ThroughputBar = tuple[str, list[float | None], list[float | None]]


def _label(cell: Cell, multi_repeat: bool) -> str:
    r = cell.record
    text = f"{r.scenario} {r.payload} B"
    if r.impairment != NO_IMPAIRMENT:
        text += f" {r.impairment}"
    return f"{text} r{r.repeat}" if multi_repeat else text


def _group_label(payload: int, impairment: str, scenario: str) -> str:
    return f"{scenario}\n{payload} B" + ("" if impairment == NO_IMPAIRMENT else f"\n{impairment}")


def _series(ok: Sequence[Cell]) -> list[plots.CellSeries]:
    """One delay series per cell, panels by payload (and impairment)."""
    multi = any(c.record.repeat > 1 for c in ok)
    return [
        plots.CellSeries(
            panel=f"{c.record.payload} B payload"
            + ("" if c.record.impairment == NO_IMPAIRMENT else f", {c.record.impairment}"),
            scenario=c.record.scenario,
            repeat=c.record.repeat,
            label=_label(c, multi),
            values=delay_samples(c),
        )
        for c in ok
    ]


def _layers(label: str, cells: Sequence[Cell]) -> LayerBar | None:
    """The bytes per layer of the first cell that has them."""
    per_layer = next(
        (
            c.metrics.get("overhead_bytes", {}).get("per_layer")
            for c in cells
            if c.metrics and isinstance(c.metrics.get("overhead_bytes"), dict)
        ),
        None,
    )
    if not isinstance(per_layer, dict):
        return None
    layers = {k: v for k, v in per_layer.items() if isinstance(v, int | float)}
    split = next((c.metrics["overhead_bytes"].get("tls13_record") for c in cells
                  if c.metrics and isinstance(c.metrics.get("overhead_bytes"), dict)), None)
    padding = split.get("padding") if isinstance(split, dict) else None
    if isinstance(padding, int | float) and isinstance(layers.get("tls"), int | float):
        layers["tls"], layers["tls_padding"] = layers["tls"] - padding, padding  # padding its own layer
    return (label, layers)


def _mean_of(cells: Sequence[Cell], path: str) -> float | None:
    values = [v for v in (metric(c, path) for c in cells) if v is not None]
    return float(np.mean(values)) if values else None


def _handshake(label: str, cells: Sequence[Cell]) -> plots.HandshakeBar:
    return plots.HandshakeBar(
        label,
        _mean_of(cells, "handshake.tcp_connect_ms"),
        _mean_of(cells, "handshake.tls_handshake_ms"),
        _mean_of(cells, "handshake.mqtt_connect_ms"),
        _mean_of(cells, "handshake.bytes_client_to_server"),
        _mean_of(cells, "handshake.bytes_server_to_client"),
    )


def _bars(
    ok: Sequence[Cell], order: Sequence[str]
) -> tuple[list[LayerBar], list[ThroughputBar], list[plots.HandshakeBar]]:
    """Per configuration: wire bytes by layer, throughput/goodput of each repeat, handshake means."""
    by_group = groups(ok)
    layers: list[LayerBar] = []
    tput: list[ThroughputBar] = []
    hand: list[plots.HandshakeBar] = []
    for key in group_keys(by_group, order):
        cells = by_group[key]
        label = _group_label(*key)
        layer = _layers(label, cells)
        if layer is not None:
            layers.append(layer)
        tput.append(
            (
                label,
                [metric(c, "throughput.wire_bps") for c in cells],
                [metric(c, "throughput.goodput_bps") for c in cells],
            )
        )
        hand.append(_handshake(label, cells))
    return layers, tput, hand


def make_figures(bundle: Bundle, order: Sequence[str]) -> list[Figure]:
    """Every figure that has something to draw, as plots/<name>.png relative to the bundle."""
    ok = sorted(bundle.ok_cells, key=cell_sort_key(order))
    colours = plots.scenario_colours(order)
    series = _series(ok)
    layers, tput, hand = _bars(ok, order)
    made = [
        (
            "delay_cdf.png",
            "Empirical CDF of one-way delay per cell (line style = repeat).",
            plots.delay_cdf(series, colours),
        ),
        ("delay_box.png", "One-way delay per cell.", plots.delay_box(series, colours)),
        (
            "wire_bytes_by_layer.png",
            "Bytes on the wire per PUBLISH, stacked by layer (median run of each configuration).",
            plots.wire_layers(layers),
        ),
        (
            "throughput.png",
            "Throughput (every frame publisher->broker) and goodput (payload only); mean of "
            "repeats, error bar = SD across repeats.",
            plots.throughput_bars(tput),
        ),
        (
            "handshake.png",
            "Connection set-up: time per phase and bytes each way (mean of repeats).",
            plots.handshake_bars(hand),
        ),
    ]
    return [Figure(f"{PLOTS}/{name}", caption, png) for name, caption, png in made if png is not None]
