"""Every option of `testbed run`, `sweep` and `report` reaches the RunSpec / SweepPlan / call it is for.

The function each command calls with the spec or plan is replaced (on its module object), so no
container starts; each option gets a value that is not its default.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli import rebuild
from orchestrator.cli.main import app
from orchestrator.errors import TestbedError
from orchestrator.measure import run as measure_run
from orchestrator.measure import sweep as sw
from orchestrator.measure.run import RunOutcome
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import load_scenario
from orchestrator.model.sweep import SweepPlan

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _options(command: str) -> set[str]:
    """Every long option of ``command`` (but --help)."""
    click_app = typer.main.get_command(app)
    params = click_app.commands[command].params  # type: ignore[attr-defined]
    return {opt for p in params for opt in p.opts if opt.startswith("--")} - {"--help"}


def _given(args: list[str]) -> set[str]:
    return {a for a in args if a.startswith("--")}


def _invoke(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)


def test_every_run_option_reaches_the_run_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[RunSpec, Path | None]] = []

    def fake_run(spec: RunSpec, out_dir: Path | None, **_callbacks: Any) -> RunOutcome:
        calls.append((spec, out_dir))
        return RunOutcome(out_dir or tmp_path, "ok", spec.samples, None, None)

    monkeypatch.setattr(measure_run, "execute_run", fake_run)
    args = ["run", "--scenario", "tls13-chacha20", "--payload", "100", "--samples", "50", "--interval", "40ms",
            "--qos", "1", "--seed", "9", "--impairment", "lossy-1pct", "--delay-mechanism", "queue",
            "--publisher", "esp32", "--serial-port", "/dev/ttyUSB3", "--baud", "921600", "--board-host", "192.0.2.7",
            "--reset-board", "--connection", "resume-ticket", "--per-connection", "10", "--close", "drop",
            "--sleep-mode", "deep", "--power-save", "modem-sleep", "--out", str(tmp_path / "run")]
    # a fleet and a lab across hosts run virtual devices: their own tests below
    assert _given(args) | FLEET_OPTIONS | LAB_OPTIONS | VDEVICE_OPTIONS | STACK_OPTIONS | EVENT_OPTIONS == \
        _options("run")

    _invoke(args)

    assert calls == [(RunSpec(scenario="tls13-chacha20", payload=100, samples=50, interval_ms=40.0, qos=1, seed=9,
                              impairment="lossy-1pct", delay_mechanism="queue", publisher="esp32",
                              serial_port="/dev/ttyUSB3", baud=921600, board_host="192.0.2.7", reset_board=True,
                              connection="resume-ticket", per_connection=10, close="drop", sleep_mode="deep",
                              power_save="modem-sleep"),
                      tmp_path / "run")]


FLEET_OPTIONS = {"--devices", "--connect-rate", "--sleep"}
LAB_OPTIONS = {"--inventory"}
# the virtual device's own (a board has no such RUN key): their test below
VDEVICE_OPTIONS = {"--mqtt", "--session", "--session-expiry-s", "--topic-alias", "--inflight", "--ack-timeout"}
STACK_OPTIONS = {"--device-stack", "--transport", "--broker"}
EVENT_OPTIONS = {"--reconnect", "--reconnect-base", "--reconnect-cap", "--events"}


def test_the_virtual_devices_protocol_and_stack_options_reach_the_run_spec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issues 25, 26 and 43: the MQTT version, the session, topic alias, in-flight window, ack timeout, device stack,
    transport."""
    calls: list[RunSpec] = []
    monkeypatch.setattr(measure_run, "execute_run",
                        lambda spec, out_dir, **_: calls.append(spec) or RunOutcome(tmp_path, "ok", 0, None, None))
    args = ["run", "--qos", "2", "--mqtt", "5", "--session", "persistent", "--session-expiry-s", "120",
            "--topic-alias", "on", "--inflight", "8", "--ack-timeout", "1500", "--device-stack", "mbedtls-3.6",
            "--transport", "websocket", "--broker", "mosquitto-2.0.21"]
    assert _given(args) >= VDEVICE_OPTIONS | STACK_OPTIONS
    _invoke(args)
    assert calls == [RunSpec(scenario="tls", qos=2, mqtt="5", session="persistent", session_expiry_s=120,
                             topic_alias="on", inflight=8, ack_timeout_ms=1500, device_stack="mbedtls-3.6",
                             transport="websocket", broker="mosquitto-2.0.21")]


def test_the_fleet_options_reach_the_run_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[RunSpec] = []
    monkeypatch.setattr(measure_run, "execute_run",
                        lambda spec, out_dir, **_: calls.append(spec) or RunOutcome(tmp_path, "ok", 0, None, None))
    _invoke(["run", "--devices", "250", "--connect-rate", "40", "--samples", "20", "--interval", "1s"])
    assert calls == [RunSpec(scenario="tls", samples=20, interval_ms=1000.0, devices=250, connect_rate=40.0)]
    assert calls[0].messages_expected == 5000 and calls[0].expected_duration_s == pytest.approx(249 / 40 + 20)


def test_a_fleet_reconnects_and_sleeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: every connection mode with --devices N, K readings per connection and the sleep between them."""
    calls: list[RunSpec] = []
    monkeypatch.setattr(measure_run, "execute_run",
                        lambda spec, out_dir, **_: calls.append(spec) or RunOutcome(tmp_path, "ok", 0, None, None))
    _invoke(["run", "--devices", "1000", "--connect-rate", "100", "--samples", "40", "--interval", "1s",
             "--connection", "resume-ticket", "--per-connection", "5", "--sleep", "2s"])
    assert calls == [RunSpec(scenario="tls", samples=40, interval_ms=1000.0, devices=1000, connect_rate=100.0,
                             connection="resume-ticket", per_connection=5, sleep_ms=2000.0)]
    spec = calls[0]
    assert spec.connections_expected == 8000
    # 8 connections of 5 readings at 1 s, 2 s asleep between them: 8 x 4 s + 7 x 2 s (+ the last interval)
    assert spec.expected_duration_s == pytest.approx(999 / 100 + 40 + 7 * (2 - 1))


def test_events_reach_the_run_spec_and_the_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27 part 2: events on the cell's timeline, the reconnect policy and a QoS 1 persistent session reach the
    fleet's command line; a malformed event is refused by the option."""
    from orchestrator.publishers.virtual import publisher_args

    calls: list[RunSpec] = []
    monkeypatch.setattr(measure_run, "execute_run",
                        lambda spec, out_dir, **_: calls.append(spec) or RunOutcome(tmp_path, "ok", 0, None, None))
    args = ["run", "--devices", "20", "--connection", "resume-ticket", "--per-connection", "5", "--qos", "1",
            "--session", "persistent", "--reconnect", "backoff", "--reconnect-base", "0.5s", "--reconnect-cap", "8s",
            "--events", "broker-restart@20s,link-down@30s:5s"]
    assert _given(args) >= EVENT_OPTIONS
    _invoke(args)
    assert calls == [RunSpec(scenario="tls", devices=20, connection="resume-ticket", per_connection=5, qos=1,
                             session="persistent", reconnect="backoff", reconnect_base_ms=500.0,
                             reconnect_cap_ms=8000.0, events="broker-restart@20s,link-down@30s:5s")]
    argv = " ".join(publisher_args(load_scenario("tls"), Layout(tmp_path), None, calls[0]))
    assert argv.startswith("fleet ") and "--session persistent" in argv
    assert "--reconnect backoff --reconnect-base-ms 500 --reconnect-cap-ms 8000" in argv
    result = runner.invoke(app, ["run", "--devices", "20", "--events", "link-down@30s"])
    assert result.exit_code != 0 and "link-down takes a duration" in result.output + str(result.exception)


def test_a_fleet_refuses_a_board_and_a_board_refuses_a_sleep_by_name() -> None:
    result = runner.invoke(app, ["run", "--devices", "10", "--publisher", "esp32", "--serial-port", "/dev/ttyUSB0"])
    assert isinstance(result.exception, TestbedError) and "--publisher virtual" in result.exception.message, result
    result = runner.invoke(app, ["run", "--connection", "reconnect", "--sleep", "2s", "--publisher", "esp32",
                                 "--serial-port", "/dev/ttyUSB0"])
    assert isinstance(result.exception, TestbedError)
    assert "(rule sleep-is-the-virtual-devices)" in result.exception.message


def _grading_tables(tmp_path: Path) -> list[Path]:
    tables = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for path, name in zip(tables, ("g1010", "tiphon"), strict=True):
        shutil.copyfile(REPO / "orchestrator" / "grading" / f"{name}.yaml", path)
    return tables


class _SweepCalls:
    """Stands in for the sweep's work: records what the command hands over."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bundle = tmp_path / "bundle"
        self.started: list[tuple[SweepPlan, Path, str, list[str]]] = []
        self.resumed: list[Path] = []
        self.ran: list[sw.SweepJob] = []
        self.derived: list[tuple[Path, str | None, list[Path]]] = []
        monkeypatch.setattr(sw, "start_sweep", self.start)
        monkeypatch.setattr(sw, "resume_sweep", self.resume)
        monkeypatch.setattr(sw, "run_sweep", self.run)
        monkeypatch.setattr(rebuild, "build_derived", self.build)

    def start(self, plan: SweepPlan, out_root: Path, name: str, command: list[str]) -> sw.SweepJob:
        self.started.append((plan, out_root, name, command))
        return sw.SweepJob(self.bundle, plan, plan.cells())

    def resume(self, bundle: Path) -> sw.SweepJob:
        self.resumed.append(bundle)
        plan = SweepPlan(payloads=[80], baseline="plain")
        return sw.SweepJob(bundle, plan, plan.cells()[1:])

    def run(self, job: sw.SweepJob, progress: Any) -> sw.SweepResult:
        self.ran.append(job)
        return sw.SweepResult(job.bundle)

    def build(self, bundle: Path, baseline: str | None = None, grading: Any = ()) -> list[Path]:
        self.derived.append((bundle, baseline, list(grading)))
        return []


def test_every_sweep_option_reaches_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _SweepCalls(tmp_path, monkeypatch)
    tables = _grading_tables(tmp_path)
    args = ["sweep", "--payloads", "70,90", "--samples", "50", "--scenarios", "tls,tls13-chacha20",
            "--repeat", "3", "--interval", "0.04s", "--qos", "1", "--impairments", "lossy-1pct,wifi-good",
            "--delay-mechanism", "netem", "--publisher", "esp32", "--serial-port", "/dev/ttyACM0", "--baud", "460800",
            "--board-host", "192.0.2.8", "--reset-board", "--seed", "9", "--baseline", "tls",
            "--connections", "persistent,resume-id", "--per-connection", "5", "--close", "drop",
            "--order", "random", "--fresh-lab-per-cell", "--sleep-modes", "stay", "--power-save", "modem-sleep",
            "--out", str(tmp_path / "out"), "--name", "mine", "--grading", str(tables[0]), "--grading", str(tables[1])]
    # --plan (a bundle's plan rerun): tests/unit/test_sweep_replay.py
    assert (_given(args) | {"--resume", "--plan", "--mqtt", "--device-stacks", "--transports",
                            "--brokers"} | FLEET_OPTIONS
            | LAB_OPTIONS | VDEVICE_OPTIONS | EVENT_OPTIONS) == _options("sweep")  # the lists of these: below

    _invoke(args)

    expected = SweepPlan(payloads=[70, 90], samples=50, scenarios=["tls", "tls13-chacha20"], repeat=3,
                         interval_ms=40.0, qos=[1], impairments=["lossy-1pct", "wifi-good"], delay_mechanism="netem",
                         publisher="esp32", serial_port="/dev/ttyACM0", baud=460800, board_host="192.0.2.8",
                         reset_board=True, seed=9, baseline="tls", connections=["persistent", "resume-id"],
                         per_connection=5, close="drop", order="random", fresh_lab_per_cell=True,
                         sleep_modes=["stay"], power_save="modem-sleep")
    [(plan, out_root, name, command)] = calls.started
    assert (plan, out_root, name, command[0]) == (expected, tmp_path / "out", "mine", "testbed")
    assert calls.ran == [sw.SweepJob(calls.bundle, expected, expected.cells())]
    assert {expected.run_spec(c).delay_mechanism for c in expected.cells()} == {"netem"}
    assert {expected.run_spec(c).serial_port for c in expected.cells()} == {"/dev/ttyACM0"}
    assert {(expected.run_spec(c).connection, expected.run_spec(c).per_connection, expected.run_spec(c).close)
            for c in expected.cells()} == {("persistent", 5, "drop"), ("resume-id", 5, "drop")}
    assert calls.derived == [(calls.bundle, "tls", tables)]
    assert calls.resumed == []


def test_the_protocol_and_the_device_stack_are_sweep_axes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _SweepCalls(tmp_path, monkeypatch)
    _invoke(["sweep", "--qos", "0,2", "--mqtt", "3.1.1,5", "--device-stacks", "mbedtls-2.28,mbedtls-3.6",
             "--session", "persistent", "--inflight", "4", "--ack-timeout", "2000", "--session-expiry-s", "60",
             "--transports", "tcp,websocket",
             "--samples", "20", "--payloads", "65", "--scenarios", "tls", "--out", str(tmp_path / "out")])
    [(plan, _root, _name, _cmd)] = calls.started
    assert plan == SweepPlan(qos=[0, 2], mqtt=["3.1.1", "5"], device_stacks=["mbedtls-2.28", "mbedtls-3.6"],
                             session="persistent", inflight=4, ack_timeout_ms=2000, session_expiry_s=60,
                             transports=["tcp", "websocket"], samples=20, payloads=[65], scenarios=["tls"])
    assert sorted(c.cell_id for c in plan.cells()) == sorted(
        f"tls-65B{q}{m}-none{s}{t}-r1" for q in ("", "-qos2") for m in ("", "-mqtt5") for s in ("", "-mbedtls36")
        for t in ("", "-ws"))


def test_the_brokers_are_a_sweep_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43 part 3: --brokers lists broker builds; each keys the cell id (auto, the default, adds nothing)."""
    calls = _SweepCalls(tmp_path, monkeypatch)
    _invoke(["sweep", "--brokers", "auto,mosquitto-2.0.21,rabbitmq", "--qos", "0,1", "--samples", "20",
             "--payloads", "65", "--scenarios", "tls", "--out", str(tmp_path / "out")])
    [(plan, _root, _name, _cmd)] = calls.started
    assert plan == SweepPlan(brokers=["auto", "mosquitto-2.0.21", "rabbitmq"], qos=[0, 1], samples=20, payloads=[65],
                             scenarios=["tls"])
    assert sorted(c.cell_id for c in plan.cells()) == sorted(
        f"tls-65B{q}-none{b}-r1" for q in ("", "-qos1") for b in ("", "-mosquitto2021", "-rabbitmq"))


def test_the_fleet_sizes_are_a_sweep_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _SweepCalls(tmp_path, monkeypatch)
    _invoke(["sweep", "--devices", "1,100,1000", "--connect-rate", "50", "--samples", "20", "--payloads", "65",
             "--scenarios", "tls", "--out", str(tmp_path / "out")])
    [(plan, _root, _name, _cmd)] = calls.started
    assert plan == SweepPlan(devices=[1, 100, 1000], connect_rate=50.0, samples=20, payloads=[65], scenarios=["tls"])
    by_id = {c.cell_id: plan.run_spec(c) for c in plan.cells()}  # in the blocked order: a fleet size is a block
    assert sorted(by_id) == ["tls-65B-none-1000dev-r1", "tls-65B-none-100dev-r1", "tls-65B-none-r1"]
    assert sorted((s.devices, s.connect_rate) for s in by_id.values()) == [(1, 50.0), (100, 50.0), (1000, 50.0)]


def test_the_inventory_reaches_the_run_spec_and_the_plan_as_an_absolute_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[RunSpec] = []
    monkeypatch.setattr(measure_run, "execute_run",
                        lambda spec, out_dir, **_: runs.append(spec) or RunOutcome(tmp_path, "ok", 0, None, None))
    monkeypatch.chdir(tmp_path)
    _invoke(["run", "--inventory", "lab.yml", "--samples", "20"])
    assert runs == [RunSpec(scenario="tls", samples=20, inventory=str(tmp_path / "lab.yml"))]
    calls = _SweepCalls(tmp_path, monkeypatch)
    _invoke(["sweep", "--inventory", "lab.yml", "--scenarios", "plain,tls", "--payloads", "65"])
    [(plan, _root, _name, _cmd)] = calls.started
    assert plan == SweepPlan(scenarios=["plain", "tls"], payloads=[65], inventory=str(tmp_path / "lab.yml"))
    assert {plan.run_spec(c).inventory for c in plan.cells()} == {str(tmp_path / "lab.yml")}


def test_an_inventory_refuses_a_board_by_name() -> None:
    result = runner.invoke(app, ["run", "--inventory", "lab.yml", "--publisher", "esp32", "--serial-port", "/dev/x"])
    assert isinstance(result.exception, TestbedError) and "--publisher virtual" in result.exception.message, result


def test_sweep_resume_reaches_resume_and_runs_its_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _SweepCalls(tmp_path, monkeypatch)
    tables = _grading_tables(tmp_path)
    old = tmp_path / "old-bundle"

    _invoke(["sweep", "--resume", str(old), "--grading", str(tables[0])])

    plan = SweepPlan(payloads=[80], baseline="plain")
    assert calls.resumed == [old] and calls.started == []
    assert calls.ran == [sw.SweepJob(old, plan, plan.cells()[1:])]
    assert calls.derived == [(old, "plain", tables[:1])]


def test_every_report_option_reaches_the_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Path, str | None, list[Path]]] = []

    def fake_rebuild(bundle: Path, baseline: str | None = None, grading: Any = (), progress: Any = None
                     ) -> list[Path]:
        calls.append((bundle, baseline, list(grading)))
        return []

    monkeypatch.setattr(rebuild, "rebuild_bundle", fake_rebuild)
    tables = _grading_tables(tmp_path)
    args = ["report", str(tmp_path / "b"), "--baseline", "tls", "--grading", str(tables[0]),
            "--grading", str(tables[1])]
    assert _given(args) == _options("report")

    _invoke(args)

    assert calls == [(tmp_path / "b", "tls", tables)]


@pytest.mark.parametrize("args,message", [
    (["run", "--interval", "2x"], "error: invalid run parameters: invalid interval '2x': use e.g. 250ms or 0.5s"),
    (["run", "--payload", "40"], "error: invalid run parameters: payload 40 B is below "
                                 "the minimum of 62 B"),
    (["run", "--samples", "0"], "error: invalid run parameters: samples: Input should be greater than or equal "
                                "to 1"),
    (["sweep", "--interval", "fast"], "error: invalid sweep plan: invalid interval 'fast'"),
    (["sweep", "--payloads", "65,65"], "error: invalid sweep plan: payloads: a payload is listed "
                                       "twice"),
    (["sweep", "--payloads", "65,x"], "error: --payloads: invalid literal for int() with base 10: 'x'"),
])
def test_impossible_parameters_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                            message: str) -> None:
    from orchestrator.cli.main import main

    code = main(args)
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.splitlines()[0].startswith(message), err
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_an_unknown_delay_mechanism_is_a_usage_error(capsys: pytest.CaptureFixture[str], command: str) -> None:
    from orchestrator.cli.main import main

    assert main([command, "--delay-mechanism", "tc"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--delay-mechanism'" in err and "'tc'" in err and "Traceback" not in err
