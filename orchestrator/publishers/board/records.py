"""What a board run becomes on disk: the RUN it is sent, and the files the analysis reads, as vdevice's.

- logs/board_messages.csv  ``seq,t_board_us,bytes,mqtt,heap,rssi,puback_us``: every MSG as the board
  printed it (its own clock), written as it comes; ``puback_us`` (QoS 1: the PUBACK round trip on the
  board's monotonic clock) is empty at QoS 0;
- logs/publisher.csv       ``seq,t_send_us,bytes``: the send log of the virtual device, the send time
  mapped to the LAB's clock with the clock estimate of the exchanges before and after the cell
  (orchestrator/analysis/clock.py); left on the board's clock, and the clocks marked not shared,
  when there is no estimate;
- logs/publisher_summary.json: vdevice's summary fields, plus ``board`` (the banner), ``clock`` (the
  estimate with its bound, or why there is none), the heap figures and ``puback_rtt_ms`` (n, median,
  p95, max of the PUBACK round trips; None without QoS 1);
- keylogs/publisher.keys (0600, a declared secret): the KEYLOG lines, so the capture decrypts (the
  analysis reads them here; logs/serial.log, which holds them too, is read by nothing).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import numpy as np

from orchestrator.analysis import clock
from orchestrator.lab.pki import Pki
from orchestrator.model.device_args import run_options
from orchestrator.model.layout import Layout
from orchestrator.model.run import RunSpec
from orchestrator.model.scenario import Scenario
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.lines import (
    PHASES,
    Banner,
    BoardLine,
    ClockSample,
    Conn,
    Done,
    Handshake,
    Keylog,
    Msg,
)
from orchestrator.results.atomic import write_text_atomic

BOARD_MESSAGES = "board_messages.csv"
EMU_CHIP = "board-emu"  # board-emu's chip= (firmware/platformio/host/src/board_emu/board_emu_main.cpp)


def run_cell(scenario: Scenario, lay: Layout, pki: Pki | None, spec: RunSpec, host: str, port: int,
             sync: tuple[str, int] | None) -> p.RunCell:
    """The RUN of one cell: the scenario's transport and suites, the session's CA and credentials."""
    tls = scenario.tls is not None
    options, extra = p.axis_keys(run_options(spec.axes, spec.values()))  # payload, samples, interval, mode ...
    password = None
    if pki is not None and not scenario.anonymous and (scenario.tls is None or scenario.tls.client_auth == "password"):
        password = pki.password_for("publisher")
    cert = key = None
    if scenario.tls is not None and scenario.tls.client_auth == "certificate" and pki is not None:
        cert = (lay.pki / "publisher.crt").read_text()
        key = (lay.pki / "publisher.key").read_text()
    return p.RunCell(
        id=lay.root.name[:p.MAX_RUN_ID], host=host, port=port, transport="tls" if tls else "plain",
        ciphers=tuple(scenario.client_cipher_iana()) if tls else (),
        ca=(lay.pki / "ca.crt").read_text() if tls else None, cert=cert, key=key,
        server_name="broker" if tls else None, username="publisher" if password else None, password=password,
        device_id=spec.device_id, client_id="testbed-publisher", keylog=tls,
        sync_host=sync[0] if sync else None, sync_port=sync[1] if sync else None,
        sync_count=p.DEFAULT_SYNC_COUNT if sync else None, extra=extra, **options)  # type: ignore[arg-type]


CONNECTIONS_HEADER = ("conn,t_open_us,tcp_connect_ms,handshake_ms,connack_ms,resumed,messages,close,error,"
                      + ",".join(PHASES.values()) + "\n")


def append_connection(lay: Layout, conn: Conn) -> None:
    """The board's CONN line as a row of the publisher's connections log (vdevice's format; the board
    prints no open time on the lab's clock, so t_open_us stays empty)."""
    path = lay.publisher_connections
    new = not path.exists()

    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.3f}"

    resumed = "" if conn.resumed is None else str(int(conn.resumed))
    phases = ",".join(ms((conn.phases or {}).get(col)) for col in PHASES.values())
    with path.open("a", encoding="ascii") as f:
        if new:
            f.write(CONNECTIONS_HEADER)
        f.write(f"{conn.index},,{ms(conn.tcp_ms)},{ms(conn.tls_ms)},{ms(conn.connack_ms)},{resumed},{conn.msgs},"
                f"{conn.close},,{phases}\n")


def append_send(lay: Layout, msg: Msg) -> None:
    path = lay.logs / BOARD_MESSAGES
    new = not path.exists()
    with path.open("a", encoding="ascii") as f:
        if new:
            f.write("seq,t_board_us,bytes,mqtt,heap,rssi,puback_us\n")
        puback = "" if msg.puback_us is None else msg.puback_us
        f.write(f"{msg.seq},{msg.t_send_us},{msg.bytes},{msg.mqtt},{msg.heap},{msg.rssi},{puback}\n")


def board_clock_estimate(lines: list[BoardLine]) -> tuple[clock.ClockEstimate | None, str | None]:
    """The clock estimate of the cell's exchanges, or None and why not."""
    phases: dict[str, list[clock.TimeSample]] = {"pre": [], "post": []}
    for x in lines:
        if isinstance(x, ClockSample) and x.phase in phases:
            phases[x.phase].append(clock.TimeSample(x.t1_us, x.t2_us, x.t3_us, x.t4_us))
    if not phases["pre"] and not phases["post"]:
        return None, "the board ran no clock exchange (no time-echo service given)"
    try:
        return clock.estimate_clock(phases["pre"], phases["post"]), None
    except clock.ClockSyncError as exc:
        return None, exc.message


def puback_rtt_ms(msgs: list[Msg]) -> dict[str, Any] | None:
    """The PUBACK round trips (QoS 1, the board's clock) in ms: n, median, p95, max; None without any."""
    rtt = np.array([m.puback_us / 1000 for m in msgs if m.puback_us is not None])
    if not rtt.size:
        return None
    return {"n": int(rtt.size), "median": round(float(np.median(rtt)), 3),
            "p95": round(float(np.percentile(rtt, 95)), 3), "max": round(float(rtt.max()), 3)}


def _clock_of(banner: Banner | None) -> str | None:
    """What the board's own times ran on (a virtual device's summary names the host's CPU model): its chip and clock;
    board-emu's (the firmware core on this host) are the host CPU's, not an ESP32's."""
    if banner is None:
        return None
    return "board-emu (the host's CPU, not an ESP32's)" if banner.chip == EMU_CHIP else \
        f"{banner.chip} at {banner.cpu_mhz} MHz"


def _summary(lines: list[BoardLine], failure: str | None, banner: Banner | None,
             est: clock.ClockEstimate | None, why: str | None) -> dict[str, Any]:
    hs = next((x for x in lines if isinstance(x, Handshake)), None)
    msgs = [x for x in lines if isinstance(x, Msg)]
    done = next((x for x in lines if isinstance(x, Done)), None)
    return {
        "device_id": banner.device if banner else None, "simulated": False,
        "transport": "tls" if hs and hs.version else "plain",
        "tls_version": hs.version if hs else None, "cipher_suite": hs.suite if hs else None,
        "tcp_connect_ms": hs.tcp_ms if hs else None, "handshake_ms": hs.tls_ms if hs else None,
        "handshake_phases": hs.phases if hs else None,
        "cpu_model": _clock_of(banner),
        "connack_ms": hs.connack_ms if hs else None, "messages_sent": done.sent if done else len(msgs),
        "errors": [failure] if failure else [], "ok": failure is None and done is not None,
        "heap": {"before_connect": hs.heap_before if hs else None, "min_during_handshake": hs.min_heap if hs else None,
                 "min_during_run": min((m.heap for m in msgs), default=None)},
        "rssi_dbm": {"min": min((m.rssi for m in msgs), default=None),
                     "max": max((m.rssi for m in msgs), default=None)},
        "puback_rtt_ms": puback_rtt_ms(msgs),
        **({"reconnects": done.reconnects, "resent": done.resent, "lost": done.lost}
           if done is not None and done.reconnects is not None else {}),
        "board": asdict(banner) if banner else None,
        "clock": ({"available": True, **est.as_dict()} if est else {"available": False, "reason": why}),
    }


def write_outputs(lay: Layout, lines: list[BoardLine], failure: str | None, banner: Banner | None) -> None:
    """publisher.csv on the lab's clock, the summary, the key log; after the run, also a failed one."""
    est, why = board_clock_estimate(lines)
    msgs = [x for x in lines if isinstance(x, Msg)]
    acks = any(m.puback_us is not None for m in msgs)  # QoS 1/2: vdevice's columns, for exchanges.csv's ack_ms_device
    rows = ["seq,t_send_us,bytes" + (",ack_us,mqtt_bytes" if acks else "")]
    for m in msgs:
        t = round(est.to_lab(m.t_send_us).lab_us) if est else m.t_send_us
        ack = f",{'' if m.puback_us is None else m.puback_us},{m.mqtt}" if acks else ""
        rows.append(f"{m.seq},{t},{m.bytes}{ack}")
    (lay.logs / "publisher.csv").write_text("\n".join(rows) + "\n")
    keys = [x.line for x in lines if isinstance(x, Keylog)]
    if keys:
        # the analysis's key-log material comes from here, not from logs/serial.log (both declared secrets: 0600)
        write_text_atomic(lay.keylogs / "publisher.keys", "\n".join(keys) + "\n")
    lay.publisher_summary.write_text(json.dumps(_summary(lines, failure, banner, est, why), indent=2) + "\n")
