"""The energy model (issue 42, part 1): every parameter sourced, the user's file in its place, the arithmetic of one
connection by hand, every figure labelled modelled, and `testbed energy model` printing them with their sources."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from energy_helpers import board_timed_run, fixture_kinds
from typer.testing import CliRunner

from orchestrator.analysis import energymodel as em
from orchestrator.cli.main import app
from orchestrator.errors import TestbedError
from orchestrator.runanalysis.energy import modelled, run_facts

SIMPLE = {"supply_v": 3.0, "tx_ma": 200, "rx_ma": 100, "cpu_active_ma": 50, "modem_sleep_ma": 20,
          "light_sleep_ma": 2, "deep_sleep_ma": 0.01, "phy_rate_mbps": 8, "frame_overhead_us": 0,
          "frame_bytes": 1e9, "boot_ms": 100, "association_ms": 200, "dhcp_ms": 100,
          "handshake_compute_ms": {"full": 300}}


def _file(tmp_path: Path, params: dict[str, object], drop_source: str | None = None) -> Path:
    data = {"name": "simple", "parameters": {k: {"value": v, "source": "test"} for k, v in params.items()},
            "inputs": {"capacity_mah": {"value": 1000, "source": "test"}, "interval_s": {"value": 10, "source": "t"}}}
    if drop_source:
        del data["parameters"][drop_source]["source"]
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_built_in_model_names_a_source_for_every_parameter() -> None:
    model = em.load_energy_model()
    assert set(model.parameters) == {*em.SCALARS, "handshake_compute_ms"}
    assert all(len(s) > 20 for s in model.sources().values())
    assert "ASSUMED" in model.parameters["association_ms"].source  # what has no source says so


def test_a_user_model_replaces_it_and_a_parameter_without_source_is_refused(tmp_path: Path) -> None:
    assert em.load_energy_model(_file(tmp_path, SIMPLE)).v("rx_ma") == 100
    with pytest.raises(TestbedError, match="tx_ma names no source"):
        em.load_energy_model(_file(tmp_path, SIMPLE, drop_source="tx_ma"))
    with pytest.raises(TestbedError, match="missing dhcp_ms"):
        em.load_energy_model(_file(tmp_path, {k: v for k, v in SIMPLE.items() if k != "dhcp_ms"}))
    with pytest.raises(TestbedError, match="rx_ma is nan"):
        em.load_energy_model(_file(tmp_path, {**SIMPLE, "rx_ma": float("nan")}))


def test_one_connection_by_hand(tmp_path: Path) -> None:
    """K = 2 readings of a full handshake, deep sleep between connections, one reading every 10 s."""
    model = em.load_energy_model(_file(tmp_path, SIMPLE))
    figs = em.ConnectionFigures("full", 2, up_bytes=2200, down_bytes=900, publish_bytes=100, tcp_ms=10, tls_ms=500,
                                mqtt_ms=20, host_compute_ms=100)
    m = em.model_reading(model, figs, sleep="deep-sleep", interval_s=10, capacity_mah=1000)
    assert m.phases_mc["association"] == pytest.approx(100 * 50 / 1e3 + 300 * 100 / 1e3)  # boot, then Wi-Fi + DHCP
    # the device's TLS: 500 - 100 ms of the host's compute + 300 ms projected; the set-up bytes' radio time
    # (2000 B at 8 Mbit/s = 2 ms) at 200 - 100 mA more, shared by time
    setup = 0.010 * 100 + 0.700 * 100 + 0.020 * 100 + 0.002 * 100
    assert m.phases_mc["tcp"] + m.phases_mc["tls"] + m.phases_mc["mqtt"] == pytest.approx(setup)
    assert m.phases_mc["publish"] == pytest.approx(2 * 100e-6 * 200)
    assert m.phases_mc["idle"] == pytest.approx(10 * 100)  # connected between its two readings, radio on
    awake = 0.4 + 0.73 + 2 * 100e-6 + 10  # wake (boot, Wi-Fi, DHCP), set-up, two PUBLISHes, the interval between
    assert m.phases_mc["sleep"] == pytest.approx((20 - awake) * 0.01)
    per = (35 + setup + 0.04 + 1000 + (20 - awake) * 0.01) / 2
    assert m.per_reading_mc == pytest.approx(per)
    assert m.per_reading_mj == pytest.approx(per * 3.0)
    assert m.life_days == pytest.approx(1000 / (per / 10) / 24)
    assert m.as_dict()["label"] == "modelled"
    assert m.notes == ["handshake compute projected (300 ms, full)"]
    board = em.ConnectionFigures("full", 2, 2200, 900, 100, 10, 500, 20, host_compute_ms=100, board_measured=True)
    assert em.tls_device_ms(model, board) == 500  # a board's handshake as it measured it, nothing projected
    assert em.model_reading(model, board, sleep="deep-sleep", interval_s=10, capacity_mah=1000).notes == []


def test_sleep_modes_and_kinds_order_as_they_should() -> None:
    model = em.load_energy_model()
    kw = {"interval_s": 300.0, "capacity_mah": 2500.0}
    full = em.ConnectionFigures("full", 1, 1600, 2600, 140, 28, 910, 41)
    resumed = em.ConnectionFigures("resumed-id", 1, 840, 520, 140, 27, 160, 39)
    plain = em.ConnectionFigures("none", 1, 560, 260, 140, 26, 0, 38)
    per = {s: em.model_reading(model, full, sleep=s, **kw).per_reading_mj for s in em.SLEEP_MODES}
    assert per["deep-sleep"] < per["light-sleep"] < per["stay-connected"]
    deep = [em.model_reading(model, f, sleep="deep-sleep", **kw).per_reading_mj for f in (full, resumed, plain)]
    assert deep[0] > deep[1] > deep[2]
    k = em.break_even_k(model, full, plain, sleep="stay-connected", **kw)
    assert k is not None and k > 1

    def at(figs: em.ConnectionFigures, n: int) -> float:
        return em.model_reading(model, em.with_k(figs, n), sleep="stay-connected", **kw).per_reading_mj
    assert at(full, k) <= at(plain, 1) < at(full, k - 1)  # the first K at or below plain MQTT at K = 1
    # deep sleep: a connection of K > 1 idles (K - 1) intervals with the radio on, dearer than a handshake
    assert em.break_even_k(model, full, plain, sleep="deep-sleep", **kw) is None


def test_a_runs_modelled_figures_and_the_command(tmp_path: Path) -> None:
    run = board_timed_run(tmp_path / "run", fixture_kinds("t12_ticket"))
    block = modelled(run_facts(run), em.load_energy_model())
    assert {(r["mode"], r["sleep"]) for r in block["rows"]} == {
        (m, s) for m in ("TLS full", "TLS resumed-ticket") for s in em.SLEEP_MODES}
    assert all(r["label"] == "modelled" and math.isfinite(r["per_reading_mj"]) for r in block["rows"])
    assert block["cell_sleep_mode"] == "stay" and block["power_save"] == "none"  # recorded before the axes: defaults
    assert [r["sleep"] for r in block["rows"] if r["ran"]] == ["stay-connected"] * 2
    assert "the board ran with sleep mode stay, power save none" in block["note"]
    result = CliRunner().invoke(app, ["energy", "model", str(run), "--interval", "60"])
    assert result.exit_code == 0, result.output
    assert "MODELLED" in result.output and "every 60 s" in result.output
    assert "Introduction to Low Power Mode in Wi-Fi Scenarios" in result.output
