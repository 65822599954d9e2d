"""`testbed board check`: is a board's run trustworthy, before a long sweep? One step per line, each with what was
seen and, when it fails, what is wrong (docs/board-check.md says what good looks like and why).

- port    the serial port opens (permissions, a program holding it, no such device)
- banner  BANNER and READY come in this testbed's protocol version, from one of its board envs (or board-emu);
          the versions it reports (Arduino, ESP-IDF, mbedTLS, CPU clock) are shown
- run     a 20-message cell of the scenario (tls) through the lab as a sweep runs it: every message arrives
- suites  the board's ClientHello in the capture offers only the scenario's cipher suites, and one is chosen
- clock   the board's clock exchanges with the lab's time-echo service give an offset with its bound
- heap    the free heap during the handshake and the run stays above HEAP_FLOOR_BYTES
- rssi    the weakest WiFi signal of the run is at least RSSI_FLOOR_DBM
- phases  the board's own TLS handshake phases (its HANDSHAKE line), shown: never a failure
A step that fails leaves the steps that need it "not run", with why. The run folder is kept as the evidence.
The cell runs through the function handed in (the CLI hands measure/run.py's execute_run: a board's cell is run
as a sweep runs it; this module sits below measure/ and starts no lab itself).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from orchestrator.analysis import tlswire
from orchestrator.backends import platformio
from orchestrator.errors import TestbedError
from orchestrator.model import ciphers
from orchestrator.model.axes import AXES
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario, load_scenario
from orchestrator.publishers.board import BoardProtocolError
from orchestrator.publishers.board.lines import Banner
from orchestrator.publishers.board.link import BoardLink
from orchestrator.publishers.board.publisher import LINKS
from orchestrator.results.atomic import read_json

SAMPLES = 20
EMULATED = "emulated"  # board-emu's board= (firmware/platformio/host/src/board_emu/board_emu_main.cpp)
# mbedTLS needs ~40 kB of heap for a TLS 1.2 handshake with an ECDSA chain; below this much left free, a longer
# chain, a second connection or a fragmented record can fail to allocate (MBEDTLS_ERR_SSL_ALLOC_FAILED)
HEAP_FLOOR_BYTES = 16 * 1024
# below -75 dBm an ESP32's link rate drops and retransmissions add milliseconds of jitter to every message
RSSI_FLOOR_DBM = -75
SIGNALLING = frozenset({0x00FF, 0x5600})  # TLS_EMPTY_RENEGOTIATION_INFO_SCSV, TLS_FALLBACK_SCSV: not suites

Verdict = Literal["ok", "FAIL", "not run"]


class Outcome(Protocol):  # what the check reads of measure/run.py's RunOutcome
    status: str
    received: int
    error: str | None


RunCell = Callable[..., Outcome]  # execute_run(spec, run_dir, status=...)


@dataclass(frozen=True)
class Step:
    name: str
    verdict: Verdict
    seen: str


@dataclass
class BoardCheck:
    steps: list[Step] = field(default_factory=list)
    run_dir: Path | None = None

    @property
    def failed(self) -> list[Step]:
        return [s for s in self.steps if s.verdict == "FAIL"]

    def add(self, name: str, problem: str | None, seen: str) -> bool:
        """The step ok (``seen``) or failed (``problem``); whether it passed."""
        self.steps.append(Step(name, "FAIL", problem) if problem else Step(name, "ok", seen))
        return problem is None

    def skip(self, names: tuple[str, ...], why: str) -> None:
        self.steps += [Step(n, "not run", why) for n in names]


AFTER_BANNER = ("run", "suites", "clock", "heap", "rssi", "phases")


@dataclass(frozen=True)
class CheckOptions:
    serial_port: str
    baud: int = AXES["baud"].default
    board_host: str | None = None
    reset_board: bool = False
    scenario: str = AXES["scenario"].command_default
    ready_timeout_s: float = 90.0  # a board in its MQ-2 warm-up takes a minute to say READY
    run_dir: Path | None = None


def default_check_dir(port: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / "board-check" / f"{stamp}-{Path(port).name or 'board'}"


def _one_line(exc: TestbedError) -> str:
    return exc.message + (f" ({exc.hint})" if exc.hint else "")


def board_envs() -> list[str]:
    """The board envs of this testbed's firmware (platformio.ini, read offline), as a BANNER's board= names them."""
    ini = (platformio.project_dir() / "platformio.ini").read_text(encoding="utf-8")
    return [e for e in platformio.project_envs(ini) if e != "native"]


def banner_problem(banner: Banner, envs: list[str]) -> str | None:
    if banner.board != EMULATED and banner.board not in envs:
        return (f"the board says board={banner.board}, not one of this testbed's envs ({', '.join(envs)}): it runs "
                "other firmware or an older build (testbed firmware build --env ENV && testbed firmware upload)")
    return None


def describe_banner(b: Banner) -> str:
    kind = "board-emu" if b.board == EMULATED else f"env {b.board}"
    return (f"{kind}, protocol {b.proto}, chip {b.chip}, fw {b.fw}, Arduino {b.arduino}, ESP-IDF {b.idf}, mbedTLS "
            f"{b.mbedtls}, CPU {b.cpu_mhz or '?'} MHz, WiFi power save {b.wifi_ps}, crypto in hardware "
            f"{', '.join(b.hw_crypto)}")


def open_link(check: BoardCheck, opts: CheckOptions) -> BoardLink | None:
    """The port and banner steps; the link, READY, when both passed."""
    link = BoardLink(opts.serial_port, baud=opts.baud)
    try:
        link.open()
    except TestbedError as exc:
        check.add("port", _one_line(exc), "")
        check.skip(("banner", *AFTER_BANNER), "the port did not open")
        return None
    check.add("port", None, f"{opts.serial_port} opened at {opts.baud} Bd")
    try:
        if opts.reset_board:
            link.reset()
        banner = link.wait_ready(timeout_s=opts.ready_timeout_s)
    except TestbedError as exc:
        last = "" if isinstance(exc, BoardProtocolError) else (  # a silent or garbled port: what it said last
            f"; the last line it printed: {link.last_text[:80]!r}" if link.last_text else "; it printed nothing")
        link.close()
        check.add("banner", _one_line(exc) + last, "")
        check.skip(AFTER_BANNER, "no usable BANNER")
        return None
    if not check.add("banner", banner_problem(banner, board_envs()), describe_banner(banner)):
        link.close()
        check.skip(AFTER_BANNER, "not this testbed's firmware")
        return None
    return link


def expected_suites(scenario: Scenario) -> set[int]:
    """The codes of the suites the scenario lets our clients offer (they speak TLS 1.2)."""
    assert scenario.tls is not None
    found = (ciphers.lookup(name, "1.2") for name in scenario.tls.ciphers_tls12)
    return {s.code for s in found if s is not None}


def suites_step(check: BoardCheck, lay: Layout, scenario: Scenario, metrics: dict[str, Any]) -> None:
    if scenario.tls is None:
        check.skip(("suites",), f"scenario {scenario.name} is plain MQTT: no ClientHello")
        return
    sessions = [s for s in (metrics.get("tls") or {}).get("sessions", []) if s.get("role") == "publisher"]
    if not sessions:
        check.add("suites", "no TLS session of the board in the capture", "")
        return
    board = {(s["client_ip"], s["client_port"]) for s in sessions}
    conns = [c for c in tlswire.connections(lay.capture, scenario.port) if tuple(c.client) in board]
    hellos = [h for c in conns for h in tlswire.tls_side(c.up.stream()).hellos[:1]]
    if not hellos:
        check.add("suites", "no ClientHello of the board in the capture", "")
        return
    offered = [x for x in hellos[0].suites if x not in SIGNALLING]
    names = ", ".join(_suite_name(x) for x in offered)
    allowed, chosen = expected_suites(scenario), sessions[0].get("cipher_suite")
    extra = [x for x in offered if x not in allowed]
    problem = (f"the board offers {names}: {', '.join(_suite_name(x) for x in extra)} beyond the scenario's "
               f"{', '.join(_suite_name(x) for x in sorted(allowed))} (the build's cipher-suite list is not applied)"
               if extra else None)
    check.add("suites", problem, f"offered {names}; the broker chose {chosen}")


def _suite_name(code: int) -> str:
    suite = ciphers.by_code(code)
    return f"{suite.iana} (0x{code:04x})" if suite else f"0x{code:04x}"


def clock_step(check: BoardCheck, metrics: dict[str, Any], summary: dict[str, Any]) -> None:
    clock = metrics.get("clock") or summary.get("clock") or {}
    if not clock.get("available"):
        check.add("clock", f"no clock mapping: {clock.get('reason') or 'the run recorded none'} (do the board's UDP "
                  "datagrams reach this host's time-echo port and its replies come back? a firewall may drop them)",
                  "")
        return
    owd = clock.get("one_way_delay") or {}
    seen = (f"offset {clock['pre']['offset_us'] / 1000:+.3f} ms, bound +-{clock['bound_us'] / 1000:.3f} ms, drift "
            f"{clock.get('drift_ppm', 0):+.1f} ppm")
    if "available" in owd:
        why = str(owd.get("reason") or "").split(":", 1)[0]  # 'clock bound +-x ms is N % of the median ...'
        seen += "; one-way delay " + ("reported" if owd["available"] else f"withheld ({why})")
    check.add("clock", None, seen)


def heap_step(check: BoardCheck, summary: dict[str, Any]) -> None:
    heap = summary.get("heap") or {}
    lows = {k: v for k, v in (("handshake", heap.get("min_during_handshake")), ("run", heap.get("min_during_run")))
            if isinstance(v, int)}
    if not lows:
        check.add("heap", "the board reported no heap figures", "")
        return
    seen = ", ".join(f"{v} B free at least during the {k}" for k, v in lows.items())
    low = {k: v for k, v in lows.items() if v < HEAP_FLOOR_BYTES}
    check.add("heap", f"{seen}: below {HEAP_FLOOR_BYTES} B (a longer chain or a reconnect may fail to allocate)"
              if low else None, seen)


def rssi_step(check: BoardCheck, summary: dict[str, Any]) -> None:
    rssi = summary.get("rssi_dbm") or {}
    weakest = rssi.get("min")
    if not isinstance(weakest, int):
        check.add("rssi", "the board reported no RSSI", "")
        return
    seen = f"{weakest} .. {rssi.get('max')} dBm"
    check.add("rssi", f"{seen}: weaker than {RSSI_FLOOR_DBM} dBm (move the board nearer the access point)"
              if weakest < RSSI_FLOOR_DBM else None, seen)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}"


def phases_step(check: BoardCheck, summary: dict[str, Any]) -> None:
    """The board's own handshake phases as its HANDSHAKE line gave them (firmware's HandshakePhases), shown."""
    phases, whole = summary.get("handshake_phases"), _ms(summary.get("handshake_ms"))
    if summary.get("transport") != "tls":
        check.add("phases", None, "plain MQTT: no TLS handshake")
    elif phases is None:
        check.add("phases", None, f"the firmware reports no handshake phases (built before them): {whole} ms whole")
    elif all(v is None for v in phases.values()):
        check.add("phases", None, f"the whole handshake only, {whole} ms: its TLS runs inside Arduino's "
                  "WiFiClientSecure, which gives no steps")
    else:
        names = (("hello_sent_ms", "hello"), ("verified_ms", "certificate verified"), ("flight_in_ms",
                 "server flight read"), ("kex_done_ms", "key exchange"), ("finished_sent_ms", "Finished"))
        steps = ", ".join(f"{name} {_ms(phases.get(col))}" for col, name in names)
        check.add("phases", None, f"{steps} ms into a {whole} ms handshake; busy {_ms(phases.get('device_busy_ms'))}"
                  f" ms ({summary.get('cpu_model') or 'the board'}'s clock)")


def run_step(check: BoardCheck, opts: CheckOptions, run: RunCell, status: Callable[[str], None]) -> Layout | None:
    """The 20-message cell through the board's open link; its run folder when it ran at all."""
    spec = RunSpec.model_validate({"scenario": opts.scenario, "samples": SAMPLES, "publisher": "esp32",
                                   "serial_port": opts.serial_port, "baud": opts.baud, "board_host": opts.board_host})
    run_dir = opts.run_dir or default_check_dir(opts.serial_port)
    check.run_dir = run_dir
    try:
        outcome = run(spec, run_dir, status=status)
    except TestbedError as exc:
        check.add("run", _one_line(exc), "")
        check.skip(AFTER_BANNER[1:], "the run did not start")
        return None
    problem = None if outcome.status == "ok" else f"the run {outcome.status}: {outcome.error}"
    check.add("run", problem, f"{outcome.received}/{SAMPLES} messages arrived ({spec.scenario}, {spec.payload} B, "
              f"every {spec.interval_ms:g} ms)")
    return Layout(run_dir)


def run_board_check(opts: CheckOptions, run: RunCell, status: Callable[[str], None] = lambda _m: None) -> BoardCheck:
    """Every step against the board on ``opts.serial_port``; the port is closed at the end."""
    check = BoardCheck()
    scenario = load_scenario(opts.scenario)  # a bad scenario is refused before the port opens
    try:
        link = open_link(check, opts)
        if link is None:
            return check
        LINKS.adopt(link)
        lay = run_step(check, opts, run, status)
        if lay is None:
            return check
        metrics, summary = read_json(lay.metrics), read_json(lay.publisher_summary)
        suites_step(check, lay, scenario, metrics)
        clock_step(check, metrics, summary)
        heap_step(check, summary)
        rssi_step(check, summary)
        phases_step(check, summary)
        return check
    finally:
        LINKS.close()
