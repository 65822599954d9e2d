"""A synthetic results bundle: realistic per_message.csv + metrics.json per cell, from a seed.

per_message.csv has the layout analysis/pipeline.py writes (one row per message). Sizes follow
the reference captures: topic of 7 bytes, so the MQTT packet is payload + 11 B; TLS 1.2
ChaCha20-Poly1305 adds 21 B per record; Ethernet 14 + IPv4 20 + TCP 32 B of headers. The first
three PUBLISH share one TCP segment (Nagle at session start), as on a real capture.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

INTERVAL_US = 250_000
HEADERS = {"ethernet": 14, "ip": 20, "tcp": 32}
BASE_DELAY_MS = {"plain": 0.60, "tls": 0.75}
BASE_TRANSIT_MS = {"plain": 0.12, "tls": 0.18}
SHARED_SEGMENT = 3  # seq 0..2 travel in one segment
DUPLICATED_SEQ = 5  # arrives twice at the subscriber

Generated = dict[str, dict[str, np.ndarray]]


def _stats(values: np.ndarray) -> dict[str, Any]:
    n = values.size
    sem = values.std(ddof=1) / np.sqrt(n)
    mean = float(values.mean())
    return {
        "available": True,
        "n": int(n),
        "mean": mean,
        "median": float(np.median(values)),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
        "min": float(values.min()),
        "max": float(values.max()),
        "std": float(values.std(ddof=1)),
        "ci95_low": mean - 1.96 * sem,
        "ci95_high": mean + 1.96 * sem,
        "negative_count": int((values < 0).sum()),
    }


def _messages(scenario: str, payload: int, samples: int, rng: np.random.Generator) -> pd.DataFrame:
    tls = scenario != "plain"
    mqtt_len = payload + 11
    tcp_payload = mqtt_len + (21 if tls else 0)
    seq = np.arange(samples)
    t_send = 1_780_000_000_000_000 + seq * INTERVAL_US
    t_recv = t_send + np.round((BASE_DELAY_MS[scenario] + rng.gamma(2.0, 0.05, samples)) * 1000).astype(
        np.int64
    )
    broker_in = t_send + 150
    broker_out = broker_in + np.round((BASE_TRANSIT_MS[scenario] + rng.gamma(2.0, 0.02, samples)) * 1000)
    msgs_in_frame = np.where(seq < SHARED_SEGMENT, SHARED_SEGMENT, 1)
    frame_len = sum(HEADERS.values()) + tcp_payload * msgs_in_frame
    return pd.DataFrame(
        {
            "seq": seq,
            "t_send_us": t_send,
            "t_send_source": "payload",
            "t_recv_us": t_recv,
            "recv_count": np.where(seq == DUPLICATED_SEQ, 2, 1),
            "dup": (seq == DUPLICATED_SEQ).astype(int),
            "delay_ms": (t_recv - t_send) / 1000.0,
            "broker_in_us": broker_in,
            "broker_out_us": broker_out.astype(np.int64),
            "broker_transit_ms": (broker_out - broker_in) / 1000.0,
            "payload_len": payload,
            "mqtt_len": mqtt_len,
            "tls_record_len": mqtt_len + 16 if tls else pd.NA,
            "tls_overhead": 21 if tls else pd.NA,
            "tcp_payload_len": tcp_payload * msgs_in_frame,
            "frame_len": frame_len,
            "msgs_in_frame": msgs_in_frame,
        }
    )


def _metrics(scenario: str, payload: int, pm: pd.DataFrame, rng: np.random.Generator) -> dict[str, Any]:
    tls = scenario != "plain"
    samples = len(pm)
    delay = pm["delay_ms"].to_numpy()
    alone = pm[pm["msgs_in_frame"] == 1]
    frame = int(alone["frame_len"].median())
    mqtt_len = payload + 11
    window_s = (pm["t_send_us"].iloc[-1] - pm["t_send_us"].iloc[0]) / 1e6
    wire_bytes = int(pm["frame_len"].iloc[0]) + int(alone["frame_len"].sum())  # shared segment counted once
    return {
        "schema_version": 1,
        "inputs": {
            "samples_expected": samples,
            "payload_bytes": payload,
            "broker_port": 8883 if tls else 1883,
            "tls": tls,
        },
        "delay_ms": _stats(delay),
        "broker_transit_ms": _stats(pm["broker_transit_ms"].to_numpy()),
        "jitter_ms": {"mean_abs_diff": float(np.abs(np.diff(delay)).mean()), "std": float(delay.std(ddof=1))},
        "throughput": {
            "window_s": window_s,
            "wire_bytes": wire_bytes,
            "wire_bps": wire_bytes * 8 / window_s,
            "payload_bytes": samples * payload,
            "goodput_bps": samples * payload * 8 / window_s,
            "frames": samples - SHARED_SEGMENT + 1,
        },
        "loss": {
            "sent": samples,
            "received_unique": samples,
            "loss_pct": 0.0,
            "duplicates": 1,
            "out_of_order": 0,
            "tcp_retransmissions": 0,
        },
        "overhead_bytes": {
            "mqtt_len": mqtt_len,
            "tls_record_len": mqtt_len + 16 if tls else None,
            "tls_overhead": 21 if tls else None,
            "tcp_payload_len": frame - 66,
            "frame_len": frame,
            "per_layer": {**HEADERS, "tls": 21 if tls else 0, "mqtt_header": 11, "payload": payload},
        },
        "handshake": {
            "tcp_connect_ms": 0.11 + rng.uniform(0, 0.02),
            "tls_handshake_ms": 3.2 + rng.uniform(0, 0.5) if tls else None,
            "mqtt_connect_ms": 0.4 + rng.uniform(0, 0.1),
            "bytes_client_to_server": 820 if tls else 140,
            "bytes_server_to_client": 2950 if tls else 70,
        },
        "tls": {
            "version": "TLS 1.2" if tls else None,
            "cipher_suite": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" if tls else None,
            "cipher_suite_id": "0xcca9" if tls else None,
        },
        "study_compatible": {
            "mean_interarrival_ms": window_s * 1000 / (samples - 1),
            "throughput_bps": wire_bytes * 8 / window_s,
            "loss_pct": 0.0,
        },
        "resources": {
            "broker_cpu_s": 0.05 + rng.uniform(0, 0.01),
            "broker_peak_mem_bytes": 6_500_000,
            "publisher_cpu_s": 0.2,
        },
        "warnings": [],
    }


def write_cell(
    runs: Path,
    scenario: str,
    payload: int,
    repeat: int,
    samples: int,
    rng: np.random.Generator,
    status: str = "ok",
    error: str | None = None,
) -> dict[str, np.ndarray]:
    """Write one run folder; returns the generated per-message delays and transits."""
    cell_id = f"{scenario}-{payload}B-none-r{repeat}"
    folder = runs / cell_id
    folder.mkdir(parents=True)
    (folder / "cell.json").write_text(
        json.dumps(
            {
                "cell_id": cell_id,
                "scenario": scenario,
                "payload": payload,
                "impairment": "none",
                "repeat": repeat,
                "status": status,
                "error": error,
            }
        ),
        encoding="utf-8",
    )
    if status != "ok":
        return {}
    pm = _messages(scenario, payload, samples, rng)
    pm.to_csv(folder / "per_message.csv", index=False)
    (folder / "metrics.json").write_text(
        json.dumps(_metrics(scenario, payload, pm, rng), indent=2), encoding="utf-8"
    )
    return {"delay": pm["delay_ms"].to_numpy(), "transit": pm["broker_transit_ms"].to_numpy()}


def make_bundle(
    root: Path,
    *,
    scenarios: Sequence[str] = ("plain", "tls"),
    payloads: Sequence[int] = (65, 100),
    repeats: int = 1,
    samples: int = 200,
    seed: int = 7,
    failed: Sequence[str] = (),
    interrupted: Sequence[str] = (),
) -> Generated:
    """Write manifest.json and runs/; returns the generated samples by cell id.

    Cells named in ``failed``/``interrupted`` get that status and no data.
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "created_utc": "2026-11-30T02:00:00Z",
                "command": [
                    "testbed",
                    "sweep",
                    "--payloads",
                    ",".join(map(str, payloads)),
                    "--samples",
                    str(samples),
                ],
                "tool_version": "0.1.0",
                "git_commit": "0123456789abcdef",
                "seed": 1234,
                "plan": {
                    "scenarios": list(scenarios),
                    "payloads": list(payloads),
                    "samples": samples,
                    "repeat": repeats,
                    "publisher": "virtual",
                    "interval_ms": 250,
                    "qos": 0,
                },
                "environment": {"kernel": "6.1.0-test", "cpu": "test cpu", "docker": "20.10.24"},
            }
        ),
        encoding="utf-8",
    )
    generated: Generated = {}
    for payload in payloads:
        for scenario in scenarios:
            for repeat in range(1, repeats + 1):
                cell_id = f"{scenario}-{payload}B-none-r{repeat}"
                status, error = "ok", None
                if cell_id in failed:
                    status, error = "failed", "broker container exited (137) mid-cell"
                elif cell_id in interrupted:
                    status, error = "interrupted", "SIGINT"
                generated[cell_id] = write_cell(
                    root / "runs", scenario, payload, repeat, samples, rng, status, error
                )
    return generated


BundleFactory = Callable[..., tuple[Path, Generated]]


@pytest.fixture
def bundle_factory(tmp_path: Path) -> BundleFactory:
    """make_bundle in a fresh folder of tmp_path for each call."""
    counter = iter(range(1000))

    def factory(**kwargs: Any) -> tuple[Path, Generated]:
        root = tmp_path / f"20261130T020000Z-bundle{next(counter)}"
        return root, make_bundle(root, **kwargs)

    return factory
