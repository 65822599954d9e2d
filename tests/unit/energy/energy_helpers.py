"""A run folder with a board's timings, for the energy tests (issue 42): its connections' kinds are those of a
recorded fixture (tests/fixtures/connections/<case>.json, in order), its times those of an ESP32 (a full TLS
handshake about 0.9 s, a resumed one 0.16 s: docs/energy.md), so each phase is long enough for a trace to measure.
Its metrics.json ``connections`` block is made by the analysis's own function (analysis/lifecycle.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from orchestrator.analysis.lifecycle import lifecycle, with_device_numbers

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "connections"
T0 = 1_780_000_000.0
# (TCP set-up, TLS handshake, MQTT connect) ms, and wire bytes up / down per connection, by kind
KIND = {"full": (28.0, 910.0, 41.0, 1450, 2600), "resumed-id": (27.0, 160.0, 39.0, 700, 520),
        "resumed-ticket": (27.0, 170.0, 39.0, 900, 560), "resumed-psk": (27.0, 240.0, 39.0, 900, 700),
        "none": (26.0, 0.0, 38.0, 420, 260)}
PUBLISH_FRAME = 140


def fixture_kinds(case: str) -> list[str]:
    return [c["kind"] for c in json.loads((FIXTURES / f"{case}.json").read_text())["connections"]]


def board_timed_run(folder: Path, kinds: list[str], *, per_connection: int = 2, interval_s: float = 0.25,
                    gap_s: float = 0.6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows, sends, t = [], [], T0
    for kind in kinds:
        tcp, tls, mqtt, up, down = KIND[kind]
        connack = t + (tcp + tls + mqtt) / 1e3
        pubs = [connack + 0.005 + j * interval_s for j in range(per_connection)]
        end = pubs[-1] + 0.060
        rows.append({"syn_time": t, "tcp_connect_ms": tcp, "tls_handshake_ms": tls if kind != "none" else None,
                     "mqtt_connect_ms": mqtt, "connack_time": connack, "end_time": end, "handshake": kind,
                     "wire_client_to_server": up + per_connection * PUBLISH_FRAME, "wire_server_to_client": down,
                     "tcp_end": "FIN client", "syn_to_first_publish_ms": (pubs[0] - t) * 1e3})
        sends += pubs
        t = end + gap_s
    table = with_device_numbers(pd.DataFrame(rows))
    table.to_csv(folder / "connections.csv", index=False)
    pd.DataFrame({"seq": range(len(sends)), "broker_in_us": [round(s * 1e6) for s in sends],
                  "frame_len": PUBLISH_FRAME, "msgs_in_frame": 1}).to_csv(folder / "per_message.csv", index=False)
    tls = any(k != "none" for k in kinds)
    block = lifecycle(table, [], mode="resume-id" if tls else "reconnect", per_connection=per_connection,
                      close="clean", expected=len(kinds), readings=len(sends), tls=tls)
    metrics = {"inputs": {"tls": tls}, "loss": {"publisher_logged": len(sends)}, "connections": block}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    # a board's banner: its TLS times are the board's own, nothing projected on top (board-emu's says "emulated")
    (folder / "cell.json").write_text(json.dumps({"spec": {"interval_ms": interval_s * 1e3},
                                                  "board": {"board": "esp32dev"}}))
    return folder


def persistent_run(folder: Path, readings: int = 6, *, interval_s: float = 0.25, tls: bool = True) -> Path:
    """A persistent cell: one connection, no connections.csv; its frames in packets.csv, its set-up times in the
    handshake block of metrics.json (as analysis/pipeline.py writes them)."""
    folder.mkdir(parents=True, exist_ok=True)
    tcp, hs, mqtt, up, down = KIND["full" if tls else "none"]
    connack = T0 + (tcp + hs + mqtt) / 1e3
    sends = [connack + 0.005 + j * interval_s for j in range(readings)]
    frames = [(T0, "publisher->broker", 74), (connack, "broker->publisher", 70),
              *((s, "publisher->broker", PUBLISH_FRAME) for s in sends), (sends[-1] + 0.06, "publisher->broker", 66)]
    pd.DataFrame(frames, columns=["time", "leg", "frame_len"]).to_csv(folder / "packets.csv", index=False)
    pd.DataFrame({"seq": range(readings), "broker_in_us": [round(s * 1e6) for s in sends],
                  "frame_len": PUBLISH_FRAME, "msgs_in_frame": 1}).to_csv(folder / "per_message.csv", index=False)
    metrics = {"inputs": {"tls": tls}, "loss": {"publisher_logged": readings},
               "handshake": {"tcp_connect_ms": tcp, "tls_handshake_ms": hs if tls else None, "mqtt_connect_ms": mqtt,
                             "bytes_client_to_server": up, "bytes_server_to_client": down}}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "cell.json").write_text(json.dumps({"spec": {"interval_ms": interval_s * 1e3},
                                                  "board": {"board": "esp32dev"}}))
    return folder
