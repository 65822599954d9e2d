"""Figures of a sweep as PNG bytes (matplotlib's Agg canvas, no pyplot global state).

Each function takes plain prepared data and returns PNG bytes, or None when there is nothing to
draw. Output is reproducible: fixed size, dpi, fonts shipped with matplotlib, no timestamp or
software tag in the PNG metadata, fixed hash salt.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 110
RC: dict[Any, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
    "svg.hashsalt": "mqtt-tls-testbed",
    "path.simplify": False,
}
LAYERS = (
    ("ethernet", "Ethernet"),
    ("ip", "IP"),
    ("tcp", "TCP"),
    ("tls", "TLS"),
    ("tls_padding", "TLS 1.3 padding"),  # a TLS 1.3 cell's record padding, apart from the rest of TLS
    ("mqtt_header", "MQTT header"),
    ("payload", "payload"),
)
LAYER_COLOURS = ("#8c8c8c", "#6baed6", "#3182bd", "#e6550d", "#fdae6b", "#74c476", "#31a354")
LINESTYLES = ("-", "--", ":", "-.")
LOG_RATIO = 20.0  # CDF x axis turns logarithmic when max / 1st percentile exceeds this


def scenario_colours(scenarios: Sequence[str]) -> dict[str, str]:
    palette = matplotlib.colormaps["tab10"]
    return {name: matplotlib.colors.to_hex(palette(i % palette.N)) for i, name in enumerate(scenarios)}


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _figure(width: float, height: float) -> Figure:
    with matplotlib.rc_context(RC):
        return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


@dataclass(frozen=True)
class CellSeries:
    """One cell's per-message values for distribution plots."""

    panel: str  # e.g. "65 B, impairment none"
    scenario: str
    repeat: int
    label: str
    values: np.ndarray


def delay_cdf(series: Sequence[CellSeries], colours: Mapping[str, str], unit: str = "ms") -> bytes | None:
    series = [s for s in series if s.values.size]
    if not series:
        return None
    panels = list(dict.fromkeys(s.panel for s in series))
    with matplotlib.rc_context(RC):
        fig = _figure(min(4.2 * len(panels), 12.6), 3.6)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, panel in zip(axes, panels, strict=True):
            for s in (s for s in series if s.panel == panel):
                x = np.sort(s.values)
                y = np.arange(1, x.size + 1) / x.size
                ax.step(
                    x,
                    y,
                    where="post",
                    color=colours[s.scenario],
                    linestyle=LINESTYLES[(s.repeat - 1) % len(LINESTYLES)],
                    linewidth=1.3,
                    label=s.label,
                )
            values = np.concatenate([s.values for s in series if s.panel == panel])
            wide = values.min() > 0 and np.percentile(values, 100) / np.percentile(values, 1) > LOG_RATIO
            if wide:
                ax.set_xscale("log")
            ax.set_title(panel)
            ax.set_xlabel(f"one-way delay ({unit}{', log scale' if wide else ''})")
            ax.set_ylim(0, 1.01)
            ax.legend(fontsize=7, loc="lower right")
        axes[0].set_ylabel("fraction of messages")
        return _png(fig)


def delay_box(series: Sequence[CellSeries], colours: Mapping[str, str], unit: str = "ms") -> bytes | None:
    series = [s for s in series if s.values.size]
    if not series:
        return None
    with matplotlib.rc_context(RC):
        fig = _figure(max(5.0, min(0.75 * len(series) + 1.5, 12.6)), 3.8)
        ax = fig.subplots()
        parts = ax.boxplot(
            [s.values for s in series],
            patch_artist=True,
            showfliers=True,
            flierprops={"markersize": 2, "alpha": 0.5},
            medianprops={"color": "black"},
        )
        for patch, s in zip(parts["boxes"], series, strict=True):
            patch.set_facecolor(colours[s.scenario])
            patch.set_alpha(0.6)
        ax.set_xticks(
            range(1, len(series) + 1), [s.label for s in series], rotation=30, ha="right", fontsize=7
        )
        ax.set_ylabel(f"one-way delay ({unit})")
        ax.set_title("One-way delay per cell (box: quartiles, whiskers: 1.5 IQR)")
        return _png(fig)


def wire_layers(bars: Sequence[tuple[str, Mapping[str, float | None]]]) -> bytes | None:
    """Stacked bytes per PUBLISH by layer; one bar per (scenario, payload)."""
    bars = [(label, layers) for label, layers in bars if any(layers.get(k) for k, _ in LAYERS)]
    if not bars:
        return None
    with matplotlib.rc_context(RC):
        fig = _figure(max(5.0, min(1.1 * len(bars) + 2.5, 12.6)), 3.9)
        ax = fig.subplots()
        x = np.arange(len(bars))
        bottom = np.zeros(len(bars))
        for (key, name), colour in zip(LAYERS, LAYER_COLOURS, strict=True):
            heights = np.array([float(layers.get(key) or 0.0) for _, layers in bars])
            ax.bar(x, heights, bottom=bottom, color=colour, label=name, width=0.6, edgecolor="white")
            for xi, (h, b) in enumerate(zip(heights, bottom, strict=True)):
                if h >= 8:
                    ax.text(xi, b + h / 2, f"{h:.0f}", ha="center", va="center", fontsize=7, color="white")
            bottom += heights
        for xi, total in enumerate(bottom):
            ax.text(xi, total + 2, f"{total:.0f} B", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [label for label, _ in bars], fontsize=8)
        ax.set_ylabel("bytes on the wire per PUBLISH")
        ax.set_ylim(0, bottom.max() * 1.15)
        ax.set_title("Wire bytes per message by layer (publisher->broker)")
        ax.legend(fontsize=7, loc="upper left", ncols=3)
        return _png(fig)


def _bar_err(values: Sequence[float | None]) -> tuple[float, float]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return (math.nan, 0.0)
    return (float(np.mean(finite)), float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0)


def throughput_bars(
    groups: Sequence[tuple[str, Sequence[float | None], Sequence[float | None]]],
) -> bytes | None:
    """Wire throughput and goodput per configuration (mean of repeats, error bar = SD when R > 1)."""
    if not groups or all(all(v is None for v in w) and all(v is None for v in g) for _, w, g in groups):
        return None
    with matplotlib.rc_context(RC):
        fig = _figure(max(5.0, min(1.2 * len(groups) + 2.5, 12.6)), 3.6)
        ax = fig.subplots()
        x = np.arange(len(groups))
        wire = [_bar_err(w) for _, w, _ in groups]
        good = [_bar_err(g) for _, _, g in groups]
        repeated = any(len(w) > 1 or len(g) > 1 for _, w, g in groups)
        ax.bar(
            x - 0.2,
            [m for m, _ in wire],
            0.4,
            yerr=[s for _, s in wire] if repeated else None,
            capsize=3,
            color="#3182bd",
            label="throughput (all frames, all headers)",
        )
        ax.bar(
            x + 0.2,
            [m for m, _ in good],
            0.4,
            yerr=[s for _, s in good] if repeated else None,
            capsize=3,
            color="#31a354",
            label="goodput (payload bytes)",
        )
        ax.set_xticks(x, [label for label, _, _ in groups], fontsize=8)
        ax.set_ylabel("bit/s (publisher->broker)")
        ax.set_title("Throughput and goodput")
        ax.legend(fontsize=7)
        return _png(fig)


@dataclass(frozen=True)
class HandshakeBar:
    label: str
    tcp_ms: float | None
    tls_ms: float | None
    mqtt_ms: float | None
    bytes_c2s: float | None
    bytes_s2c: float | None


def handshake_bars(bars: Sequence[HandshakeBar]) -> bytes | None:
    if not bars or all(
        b.tcp_ms is None
        and b.tls_ms is None
        and b.mqtt_ms is None
        and b.bytes_c2s is None
        and b.bytes_s2c is None
        for b in bars
    ):
        return None
    with matplotlib.rc_context(RC):
        fig = _figure(max(7.0, min(2.0 * len(bars) + 3, 12.6)), 3.6)
        ax_t, ax_b = fig.subplots(1, 2)
        x = np.arange(len(bars))
        bottom = np.zeros(len(bars))
        for attr, name, colour in (
            ("tcp_ms", "TCP connect", "#3182bd"),
            ("tls_ms", "TLS handshake", "#e6550d"),
            ("mqtt_ms", "MQTT CONNECT->CONNACK", "#31a354"),
        ):
            heights = np.array([getattr(b, attr) or 0.0 for b in bars])
            ax_t.bar(x, heights, 0.6, bottom=bottom, color=colour, label=name)
            bottom += heights
        ax_t.set_xticks(x, [b.label for b in bars], fontsize=8)
        ax_t.set_ylabel("ms")
        ax_t.set_title("Connection set-up time")
        ax_t.legend(fontsize=7)
        ax_b.bar(x - 0.2, [b.bytes_c2s or 0 for b in bars], 0.4, color="#756bb1", label="client->server")
        ax_b.bar(x + 0.2, [b.bytes_s2c or 0 for b in bars], 0.4, color="#bcbddc", label="server->client")
        ax_b.set_xticks(x, [b.label for b in bars], fontsize=8)
        ax_b.set_ylabel("bytes")
        ax_b.set_title("Handshake bytes (TCP + TLS + MQTT connect)")
        ax_b.legend(fontsize=7)
        return _png(fig)


def cost_per_reading(lines: Sequence[tuple[str, float, float]], marks: Sequence[int]) -> bytes | None:
    """Wire bytes per reading F/K + m against readings per connection K (log axis), one line per
    (label, F, m); the K values of ``marks`` drawn as points."""
    if not lines:
        return None
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot()
    k = np.unique(np.round(np.logspace(0, math.log10(max(marks) * 2), 60)))
    for i, (label, fixed, per_reading) in enumerate(lines):
        (line,) = ax.plot(k, fixed / k + per_reading, LINESTYLES[i % len(LINESTYLES)], label=label)
        ax.plot(marks, [fixed / m + per_reading for m in marks], "o", color=line.get_color(), markersize=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("readings per connection (K)")
    ax.set_ylabel("wire bytes per reading")
    ax.legend(fontsize=7)
    return _png(fig)


SPLIT_COLOURS = ("#e6550d", "#3182bd", "#31a354", "#bdbdbd")  # device, broker, network, held by TCP


def split_bars(bars: Sequence[tuple[str, Sequence[float]]], parts: Sequence[str]) -> bytes | None:
    """Stacked bars, one per (label, the parts' ms in ``parts`` order), labelled measured on the wire."""
    if not bars:
        return None
    with matplotlib.rc_context(RC):
        fig = _figure(max(6.0, min(1.4 * len(bars) + 3, 12.6)), 4.0)
        ax = fig.add_subplot()
        x = np.arange(len(bars))
        bottom = np.zeros(len(bars))
        for i, name in enumerate(parts):
            heights = np.array([values[i] for _, values in bars], dtype=float)
            ax.bar(x, heights, 0.6, bottom=bottom, color=SPLIT_COLOURS[i % len(SPLIT_COLOURS)], label=name)
            bottom += heights
        ax.set_xticks(x, [label for label, _ in bars], fontsize=7)
        ax.set_ylabel("ms (median per part)")
        ax.set_title("Connection set-up, first SYN -> CONNACK: measured on the wire")
        ax.legend(fontsize=7)
        return _png(fig)
