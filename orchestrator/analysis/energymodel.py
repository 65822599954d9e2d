"""A device's energy per reading and its battery life, MODELLED from what a cell measured (issue 42, part 1).

The parameters are data: ``orchestrator/analysis/esp32_energy.yaml`` (every one with its value and its source; a
user's file of the same shape replaces it, and one without a source is refused). What the cell measured comes in
as :class:`ConnectionFigures`, one per kind of connection (plain, TLS full, TLS resumed): its bytes each way, the
readings it carried (K), its TCP, TLS and MQTT set-up times, and the device's handshake compute (measured on a board,
else projected from the parameters). Charge is in mC (mA x s), energy in mJ (charge x the supply voltage).

One connection of K readings at a reading interval T, per phase:

- association: only where the device deep-sleeps between connections (a wake boots, associates and asks DHCP):
  boot_ms at cpu_active_ma, association_ms + dhcp_ms at rx_ma.
- tcp, tls, mqtt: the set-up times at rx_ma (the radio listening, the CPU running), the TLS time being the
  device's: the wire's wait plus the device compute (a board's measured split; otherwise the capture's TLS time
  less the host's own compute share, plus the projected ESP32 compute for the kind); plus the set-up bytes' radio
  time (one frame per started ``frame_bytes``, each ``frame_overhead_us`` plus its bytes at ``phy_rate_mbps``)
  at tx_ma - rx_ma more, shared over the three by their times.
- publish: each reading's PUBLISH frame on the air at tx_ma.
- idle: the connection's (K - 1) intervals between readings, connected: rx_ma with the radio's power save off
  (the board today: ``WiFi.setSleep(false)``), modem_sleep_ma with modem-sleep.
- sleep: the rest of the K intervals, by the sleep mode between connections: stay-connected (the idle current),
  light-sleep (light_sleep_ma, Wi-Fi kept) or deep-sleep (deep_sleep_ma, Wi-Fi lost: the next connection pays
  the association phase).

Per reading: the connection's charge / K. Battery life: capacity_mah / (charge per reading / T).
A cell records the sleep mode and power save it ran with (the axes ``sleep_mode`` and ``power_save``,
``SLEEP_OF_AXIS`` names them here); every figure here is modelled, whichever the cell ran.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import TestbedError
from orchestrator.model.axes import AXES
from orchestrator.model.yamlfile import read_yaml

BUILTIN = "orchestrator/analysis/esp32_energy.yaml"
SLEEP_MODES = ("stay-connected", "light-sleep", "deep-sleep")
SLEEP_OF_AXIS = dict(zip(AXES["sleep_mode"].choices or (), SLEEP_MODES, strict=True))  # stay, light, deep
POWER_SAVES: tuple[str, ...] = AXES["power_save"].choices or ()
PHASES = ("association", "tcp", "tls", "mqtt", "publish", "idle", "sleep")
SCALARS = ("supply_v", "tx_ma", "rx_ma", "cpu_active_ma", "modem_sleep_ma", "light_sleep_ma", "deep_sleep_ma",
           "phy_rate_mbps", "frame_overhead_us", "frame_bytes", "boot_ms", "association_ms", "dhcp_ms")
COMPUTE_KINDS = ("full", "resumed-id", "resumed-ticket", "resumed-psk")
INPUTS = ("capacity_mah", "interval_s")
LABEL = "modelled"


@dataclass(frozen=True)
class Parameter:
    value: Any
    source: str


@dataclass(frozen=True)
class EnergyModel:
    """The parameters (each with its source) and the default inputs, and where they were read."""

    name: str
    origin: str
    parameters: dict[str, Parameter]
    inputs: dict[str, Parameter]

    def v(self, key: str) -> float:
        return float(self.parameters[key].value)

    def compute_ms(self, kind: str) -> float:
        table = self.parameters["handshake_compute_ms"].value
        return float(table.get(kind, 0.0))

    def sources(self) -> dict[str, str]:
        return {k: p.source for k, p in {**self.parameters, **self.inputs}.items()}


def _finite(origin: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TestbedError(f"{origin}: {key} is {value!r}, not a finite number >= 0",
                           hint=f"see {BUILTIN} for the shape of an energy model")
    return float(value)


def _parameter(origin: str, key: str, entry: Any) -> Parameter:
    if not isinstance(entry, Mapping) or "value" not in entry:
        raise TestbedError(f"{origin}: {key} has no value", hint=f"each parameter is {{value: ..., source: ...}}, "
                                                                   f"as in {BUILTIN}")
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise TestbedError(f"{origin}: {key} names no source", hint="every parameter of an energy model names "
                                                                   "where its value comes from (a datasheet section, "
                                                                   "a URL, or ASSUMED and why)")
    value = entry["value"]
    if isinstance(value, Mapping):
        value = {str(k): _finite(origin, f"{key}.{k}", v) for k, v in value.items()}
    else:
        value = _finite(origin, key, value)
    return Parameter(value, source.strip())


def parse_model(data: Any, origin: str) -> EnergyModel:
    """An energy model from its YAML's data; refuses a missing parameter, a missing source, a bad number."""
    if not isinstance(data, Mapping) or not isinstance(data.get("parameters"), Mapping):
        raise TestbedError(f"{origin}: not an energy model (no 'parameters' mapping)", hint=f"see {BUILTIN}")
    raw, raw_inputs = data["parameters"], data.get("inputs") or {}
    missing = [k for k in (*SCALARS, "handshake_compute_ms") if k not in raw]
    missing += [f"inputs.{k}" for k in INPUTS if k not in raw_inputs]
    if missing:
        raise TestbedError(f"{origin}: missing {', '.join(missing)}", hint=f"see {BUILTIN}")
    unknown = sorted(set(raw) - {*SCALARS, "handshake_compute_ms"})
    if unknown:
        raise TestbedError(f"{origin}: unknown parameter(s) {', '.join(unknown)}", hint=f"see {BUILTIN}")
    params = {k: _parameter(origin, k, raw[k]) for k in (*SCALARS, "handshake_compute_ms")}
    if not isinstance(params["handshake_compute_ms"].value, dict):
        raise TestbedError(f"{origin}: handshake_compute_ms is not a mapping of kind -> ms",
                           hint=f"kinds: {', '.join(COMPUTE_KINDS)}")
    if params["phy_rate_mbps"].value <= 0 or params["frame_bytes"].value <= 0:
        raise TestbedError(f"{origin}: phy_rate_mbps and frame_bytes must be above 0", hint=f"see {BUILTIN}")
    inputs = {k: _parameter(origin, f"inputs.{k}", raw_inputs[k]) for k in INPUTS}
    return EnergyModel(str(data.get("name") or origin), origin, params, inputs)


def load_energy_model(path: Path | None = None) -> EnergyModel:
    """The built-in ESP32 model, or the user's file ``path`` in its place."""
    if path is None:
        text = resources.files("orchestrator.analysis").joinpath("esp32_energy.yaml").read_text(encoding="utf-8")
        return parse_model(yaml.safe_load(text), BUILTIN)
    if not path.is_file():
        raise TestbedError(f"{path}: cannot read the energy model (no such file)")
    return parse_model(read_yaml(path)[0], str(path))  # the user's file: as every YAML a user gives is read


@dataclass(frozen=True)
class ConnectionFigures:
    """What a cell measured of one kind of connection (medians over its connections of that kind)."""

    kind: str  # "none" (plain), "full", "resumed-id", "resumed-ticket", "resumed-psk"
    per_connection: float  # K: readings per connection
    up_bytes: float  # every frame of one connection, device -> broker
    down_bytes: float
    publish_bytes: float  # one reading's PUBLISH frame
    tcp_ms: float
    tls_ms: float
    mqtt_ms: float
    host_compute_ms: float = 0.0  # the compute share of tls_ms where the publisher was not a board
    board_measured: bool = False  # tls_ms is a board's own (its compute measured, nothing projected)

    @property
    def label(self) -> str:
        return {"none": "plain", "full": "TLS full"}.get(self.kind, f"TLS {self.kind}")


@dataclass(frozen=True)
class Modelled:
    """One figure set of the model: charge per phase and per reading, energy, battery life; always modelled."""

    kind: str
    sleep: str
    power_save: str
    per_connection: float
    interval_s: float
    phases_mc: dict[str, float]  # per connection
    per_reading_mc: float
    per_reading_mj: float
    life_days: float
    label: str = LABEL
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "sleep": self.sleep, "power_save": self.power_save,
                "per_connection": self.per_connection, "interval_s": self.interval_s,
                "phases_mc_per_connection": {k: round(v, 6) for k, v in self.phases_mc.items()},
                "per_reading_mc": round(self.per_reading_mc, 6), "per_reading_mj": round(self.per_reading_mj, 6),
                "battery_life_days": round(self.life_days, 3), "notes": self.notes}


def airtime_s(model: EnergyModel, nbytes: float) -> float:
    """Radio time of ``nbytes`` in one direction: one frame per started frame_bytes, overhead plus bits at the rate."""
    if nbytes <= 0:
        return 0.0
    frames = math.ceil(nbytes / model.v("frame_bytes"))
    return frames * model.v("frame_overhead_us") / 1e6 + nbytes * 8 / (model.v("phy_rate_mbps") * 1e6)


def tls_device_ms(model: EnergyModel, figs: ConnectionFigures) -> float:
    """The TLS time on the device: a board's as measured; else the wire's less the host's compute, plus the
    projected ESP32 compute of the kind."""
    if figs.kind == "none":
        return 0.0
    if figs.board_measured:
        return figs.tls_ms
    return max(figs.tls_ms - figs.host_compute_ms, 0.0) + model.compute_ms(figs.kind)


def _setup_phases(model: EnergyModel, figs: ConnectionFigures) -> dict[str, float]:
    rx, tx = model.v("rx_ma"), model.v("tx_ma")
    times = {"tcp": figs.tcp_ms / 1e3, "tls": tls_device_ms(model, figs) / 1e3, "mqtt": figs.mqtt_ms / 1e3}
    setup_up = max(figs.up_bytes - figs.per_connection * figs.publish_bytes, 0.0)
    extra = airtime_s(model, setup_up) * (tx - rx)
    total = sum(times.values()) or 1.0
    return {k: t * rx + extra * t / total for k, t in times.items()}


def model_reading(model: EnergyModel, figs: ConnectionFigures, *, sleep: str, interval_s: float,
                  capacity_mah: float, power_save: str | None = None) -> Modelled:
    """The charge of one connection per phase, per reading, and the battery life; labelled modelled. power_save:
    the axis's word (None: its default, the radio on)."""
    power_save = power_save or str(AXES["power_save"].default)
    if sleep not in SLEEP_MODES or power_save not in POWER_SAVES:
        raise TestbedError(f"unknown sleep mode {sleep!r} or power save {power_save!r}",
                           hint=f"sleep: {', '.join(SLEEP_MODES)}; power save: {', '.join(POWER_SAVES)}")
    k = max(figs.per_connection, 1.0)
    idle_ma = model.v("rx_ma") if power_save == "none" else model.v("modem_sleep_ma")
    phases = dict.fromkeys(PHASES, 0.0)
    wake_s = 0.0
    if sleep == "deep-sleep":
        wake_s = (model.v("boot_ms") + model.v("association_ms") + model.v("dhcp_ms")) / 1e3
        phases["association"] = (model.v("boot_ms") * model.v("cpu_active_ma")
                                 + (model.v("association_ms") + model.v("dhcp_ms")) * model.v("rx_ma")) / 1e3
    phases.update(_setup_phases(model, figs))
    publish_s = airtime_s(model, figs.publish_bytes)
    phases["publish"] = k * publish_s * model.v("tx_ma")
    idle_s = (k - 1) * interval_s
    phases["idle"] = idle_s * idle_ma
    awake_s = wake_s + (figs.tcp_ms + tls_device_ms(model, figs) + figs.mqtt_ms) / 1e3 + k * publish_s + idle_s
    sleep_ma = {"stay-connected": idle_ma, "light-sleep": model.v("light_sleep_ma"),
                "deep-sleep": model.v("deep_sleep_ma")}[sleep]
    phases["sleep"] = max(k * interval_s - awake_s, 0.0) * sleep_ma
    per_reading = sum(phases.values()) / k
    avg_ma = per_reading / interval_s
    notes = [] if figs.board_measured or figs.kind == "none" else [
        f"handshake compute projected ({model.compute_ms(figs.kind):.0f} ms, {figs.kind})"]
    if awake_s > k * interval_s:
        notes.append("the device is awake longer than its readings' intervals: no sleep left")
    return Modelled(figs.kind, sleep, power_save, k, interval_s, phases, per_reading,
                    per_reading * model.v("supply_v"), capacity_mah / avg_ma / 24.0 if avg_ma > 0 else math.inf,
                    notes=notes)


def with_k(figs: ConnectionFigures, k: float) -> ConnectionFigures:
    """The same connection carrying ``k`` readings: its set-up bytes kept, a PUBLISH frame more or less per reading."""
    up = figs.up_bytes - figs.per_connection * figs.publish_bytes + k * figs.publish_bytes
    return ConnectionFigures(figs.kind, k, up, figs.down_bytes, figs.publish_bytes, figs.tcp_ms, figs.tls_ms,
                             figs.mqtt_ms, figs.host_compute_ms, figs.board_measured)


def break_even_k(model: EnergyModel, tls: ConnectionFigures, plain: ConnectionFigures, *, sleep: str,
                 interval_s: float, capacity_mah: float, limit: int = 1000) -> int | None:
    """The fewest readings per connection at which a TLS mode's modelled energy per reading is at most plain
    MQTT's reconnecting for every reading (K = 1); None when no K up to ``limit`` gets there (a longer connection
    also idles longer between its readings, so the energy per reading need not fall as K grows: every K is tried)."""
    def at(figs: ConnectionFigures, k: float) -> float:
        return model_reading(model, with_k(figs, k), sleep=sleep, interval_s=interval_s,
                             capacity_mah=capacity_mah).per_reading_mc
    target = at(plain, 1)
    return next((k for k in range(1, limit + 1) if at(tls, k) <= target), None)
