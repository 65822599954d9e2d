"""A synthetic results bundle: realistic per_message.csv + metrics.json per cell, from a seed.

Sizes follow the reference captures (topic of 7 bytes: MQTT packet = payload + 11 B; TLS 1.2
ChaCha20-Poly1305 adds 21 B per record; Ethernet 14 + IPv4 20 + TCP 32 B of headers).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

INTERVAL_US = 250_000
HEADERS = {"ethernet": 14, "ip": 20, "tcp": 32}
BASE_DELAY_MS = {"plain": 0.60, "tls": 0.75}
BASE_TRANSIT_MS = {"plain": 0.12, "tls": 0.18}


def _stats(values: np.ndarray) -> dict[str, Any]:
    n = values.size
    sem = values.std(ddof=1) / np.sqrt(n)
    return {
        "available": True,
        "n": int(n),
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
        "min": float(values.min()),
        "max": float(values.max()),
        "std": float(values.std(ddof=1)),
        "ci95_low": float(values.mean() - 1.96 * sem),
        "ci95_high": float(values.mean() + 1.96 * sem),
        "negative_count": int((values < 0).sum()),
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
    """Write one run folder; returns the generated per-message delays/transits."""
    tls = scenario != "plain"
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
    mqtt_len = payload + 11
    tls_overhead = 21 if tls else 0
    tcp_payload = mqtt_len + tls_overhead
    frame = sum(HEADERS.values()) + tcp_payload
    seq = np.arange(samples)
    t_send = 1_780_000_000_000_000 + seq * INTERVAL_US
    delay = BASE_DELAY_MS[scenario] + rng.gamma(2.0, 0.05, samples)
    transit = BASE_TRANSIT_MS[scenario] + rng.gamma(2.0, 0.02, samples)
    t_recv = t_send + np.round(delay * 1000).astype(np.int64)
    delay = (t_recv - t_send) / 1000.0
    with (folder / "per_message.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "seq",
                "t_send_us",
                "t_recv_us",
                "delay_ms",
                "broker_transit_ms",
                "payload_len",
                "mqtt_len",
                "tls_record_len",
                "tls_overhead",
                "tcp_payload_len",
                "frame_len",
                "dup",
                "direction",
            ]
        )
        for i in range(samples):
            for direction in ("publisher->broker", "broker->subscriber"):
                writer.writerow(
                    [
                        i,
                        t_send[i],
                        t_recv[i],
                        f"{delay[i]:.3f}",
                        f"{transit[i]:.6f}",
                        payload,
                        mqtt_len,
                        mqtt_len + 16 if tls else "",
                        tls_overhead if tls else "",
                        tcp_payload,
                        frame,
                        False,
                        direction,
                    ]
                )
    window_s = (t_send[-1] - t_send[0]) / 1e6
    diffs = np.abs(np.diff(delay))
    metrics = {
        "schema_version": 1,
        "inputs": {
            "samples_expected": samples,
            "payload_bytes": payload,
            "broker_port": 8883 if tls else 1883,
            "tls": tls,
        },
        "delay_ms": _stats(delay),
        "broker_transit_ms": _stats(transit),
        "jitter_ms": {"mean_abs_diff": float(diffs.mean()), "std": float(delay.std(ddof=1))},
        "throughput": {
            "window_s": window_s,
            "wire_bytes": samples * frame,
            "wire_bps": samples * frame * 8 / window_s,
            "payload_bytes": samples * payload,
            "goodput_bps": samples * payload * 8 / window_s,
            "frames": samples,
        },
        "loss": {
            "sent": samples,
            "received_unique": samples,
            "loss_pct": 0.0,
            "duplicates": 0,
            "out_of_order": 0,
            "tcp_retransmissions": 0,
        },
        "overhead_bytes": {
            "mqtt_len": mqtt_len,
            "tls_record_len": mqtt_len + 16 if tls else None,
            "tls_overhead": tls_overhead if tls else None,
            "tcp_payload_len": tcp_payload,
            "frame_len": frame,
            "per_layer": {**HEADERS, "tls": tls_overhead, "mqtt_header": 11, "payload": payload},
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
            "throughput_bps": samples * frame * 8 / window_s,
            "loss_pct": 0.0,
        },
        "resources": {
            "broker_cpu_s": 0.05 + rng.uniform(0, 0.01),
            "broker_peak_mem_bytes": 6_500_000,
            "publisher_cpu_s": 0.2,
        },
        "warnings": [],
    }
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    return {"delay": delay, "transit": transit}


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
) -> dict[str, dict[str, np.ndarray]]:
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
    generated: dict[str, dict[str, np.ndarray]] = {}
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


@pytest.fixture
def bundle_factory(tmp_path: Path) -> Callable[..., tuple[Path, dict[str, dict[str, np.ndarray]]]]:
    counter = iter(range(1000))

    def factory(**kwargs: Any) -> tuple[Path, dict[str, dict[str, np.ndarray]]]:
        root = tmp_path / f"20261130T020000Z-bundle{next(counter)}"
        return root, make_bundle(root, **kwargs)

    return factory
