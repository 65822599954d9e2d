"""The notebook API (orchestrator/results/notebook.py, docs/notebook.md): docs/notebook.md's worked example runs
as the doc shows it, on the bundle of the reference captures (tests/golden/regenerate.py), and prints the doc's
output; its figures agree with the analysis's own metrics.json; the frames have their types and units, and what
a bundle does not have stays missing.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from orchestrator.errors import TestbedError
from orchestrator.model.run import RunSpec
from orchestrator.report.loader import load_bundle as report_load_bundle
from orchestrator.results import ResultsBundle, load
from orchestrator.results.bundle import load_bundle
from tests.golden import regenerate
from tests.unit.report.conftest import make_bundle

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "notebook.md"
GOLDEN = "20261201T000000Z-golden"  # the bundle's folder name the doc's output shows
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(DOC.read_text(encoding="utf-8")) if lang == kind]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding results/<the golden bundle>, as the doc's example expects to be run from."""
    if not (regenerate.reference_dir() / "README.md").is_file():
        pytest.fail(f"reference captures not found at {regenerate.reference_dir()}: set TESTBED_REFERENCE_CAPTURES")
    root = tmp_path_factory.mktemp("notebook")
    regenerate.build(root / "results" / GOLDEN)
    return root


@pytest.fixture(scope="module")
def example(workdir: Path) -> tuple[dict[str, Any], str]:
    """The doc's first python block run in ``workdir``: its namespace and what it printed."""
    namespace: dict[str, Any] = {}
    out = io.StringIO()
    with contextlib.chdir(workdir), contextlib.redirect_stdout(out):
        exec(compile(blocks("python")[0], str(DOC), "exec"), namespace)  # noqa: S102 - our own doc's example
    return namespace, out.getvalue()


def golden_metrics(workdir: Path) -> dict[str, dict[str, Any]]:
    runs = workdir / "results" / GOLDEN / "runs"
    return {p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(runs.glob("*/metrics.json"))}


def test_the_example_prints_what_the_doc_shows(example: tuple[dict[str, Any], str]) -> None:
    printed = [line.rstrip() for line in example[1].strip().splitlines()]
    shown = [line.rstrip() for line in blocks("text")[0].strip().splitlines()]
    assert printed == shown


def test_tls_adds_what_its_records_add_per_publish(example: tuple[dict[str, Any], str], workdir: Path) -> None:
    added = example[0]["added"]
    for payload in (65, 100):
        assert added.loc[payload, "t12chacha"] == 21  # 5-byte record header + 16-byte Poly1305 tag
        assert added.loc[payload, "t13chacha"] == 22  # + the inner content type
        assert added.loc[payload, "t12aes"] == 29  # + GCM's 8-byte explicit nonce
    assert added.loc[65, "fixture"] == 21
    assert pd.isna(added.loc[100, "fixture"])  # no 100 B session in the fixture capture: missing, not 0
    # the analysis's own figure, from metrics.json read directly
    metrics = golden_metrics(workdir)
    assert metrics["t12chacha-65B-none-r1"]["overhead_bytes"]["tls_overhead"] == 21
    for payload in (65, 100):
        plain = metrics[f"plain-{payload}B-none-r1"]["overhead_bytes"]["frame_len"]
        tls = metrics[f"t12chacha-{payload}B-none-r1"]["overhead_bytes"]["frame_len"]
        assert tls - plain == added.loc[payload, "t12chacha"]


def test_the_median_delays_are_the_analysis_own(example: tuple[dict[str, Any], str], workdir: Path) -> None:
    delay = example[0]["delay"]
    metrics = golden_metrics(workdir)
    assert sorted(map(str, delay.index)) == sorted(metrics)
    for cell_id, figures in metrics.items():
        assert delay[cell_id] == pytest.approx(figures["delay_ms"]["median"], abs=1e-9)
    assert delay["plain-65B-none-r1"] == pytest.approx(0.5345)


def test_the_comparisons_query_of_the_doc(example: tuple[dict[str, Any], str]) -> None:
    namespace = example[0]
    table = eval(blocks("python")[1], namespace)  # noqa: S307 - our own doc's example
    assert list(table["payload"]) == [65, 100]
    delay = namespace["delay"]
    assert list(table["scenario_median"]) == pytest.approx(
        [delay["t12chacha-65B-none-r1"], delay["t12chacha-100B-none-r1"]])
    assert (table["ci95_median_low"] <= table["delta_median"]).all()


def test_key_columns_have_their_types_and_units(example: tuple[dict[str, Any], str]) -> None:
    bundle: ResultsBundle = example[0]["bundle"]
    cells, msgs, packets, summary = bundle.cells, bundle.messages, bundle.packets, bundle.summary
    assert msgs is not None and packets is not None and summary is not None and bundle.comparisons is not None
    assert isinstance(cells["cell_id"].dtype, pd.CategoricalDtype)
    assert list(cells["cell_id"].cat.categories) == sorted(golden_metrics_names(bundle))
    assert {str(c): str(cells[c].dtype) for c in ("scenario", "payload", "status", "repeat", "started_utc")} == {
        "scenario": "category", "payload": "Int64", "status": "category", "repeat": "Int64",
        "started_utc": "datetime64[ns, UTC]"}
    assert {c: str(msgs[c].dtype) for c in ("cell_id", "seq", "t_send_us", "delay_ms", "frame_len", "tls_overhead")} \
        == {"cell_id": "category", "seq": "Int64", "t_send_us": "Int64", "delay_ms": "float64", "frame_len": "Int64",
            "tls_overhead": "Int64"}
    assert str(packets["time"].dtype) == "datetime64[ns, UTC]" and str(packets["retrans"].dtype) == "boolean"
    assert msgs.attrs["units"]["delay_ms"] == "ms" and msgs.attrs["units"]["frame_len"] == "B"
    assert summary.attrs["units"]["broker_cpu_s"] == "s" and "seq" not in msgs.attrs["units"]
    assert str(bundle.comparisons["unit"].dtype) == "category"
    # n/a stays missing: a plain cell has no TLS record and no handshake
    plain = summary.set_index("cell_id").loc["plain-65B-none-r1"]
    assert pd.isna(plain["tls_handshake_ms"]) and pd.isna(plain["tls_overhead"]) and pd.isna(plain["tls_version"])
    assert msgs.loc[msgs["cell_id"] == "plain-65B-none-r1", "tls_overhead"].isna().all()
    assert bundle.connections is None and bundle.devices is None  # no reconnecting cell, no fleet


def golden_metrics_names(bundle: ResultsBundle) -> list[str]:
    return [p.parent.name for p in (bundle.root / "runs").glob("*/metrics.json")]


def test_failed_cells_are_rows_without_data(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, payloads=(65,), samples=20, failed=("tls-65B-none-r1",))
    bundle = load(root)
    cells = bundle.cells.set_index("cell_id")
    assert cells.loc["tls-65B-none-r1", "status"] == "failed"
    assert cells.loc["tls-65B-none-r1", "error"] == "broker container exited (137) mid-cell"
    assert pd.isna(cells.loc["plain-65B-none-r1", "error"])
    assert bundle.messages is not None
    assert set(bundle.messages["cell_id"].astype(str)) == {"plain-65B-none-r1"}
    assert list(bundle.messages["cell_id"].cat.categories) == ["plain-65B-none-r1", "tls-65B-none-r1"]
    assert bundle.summary is None and bundle.comparisons is None and bundle.packets is None  # no report built
    assert set(bundle.metrics) == {"plain-65B-none-r1"}


def test_a_fraction_is_never_rounded_and_n_a_is_missing(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, payloads=(65,), samples=20)
    (root / "summary.csv").write_text("cell_id,frame_len,delay_n,tls_version\na,163.5,20,TLS 1.2\nb,n/a,n/a,n/a\n",
                                      encoding="utf-8")
    summary = load(root).summary
    assert summary is not None
    assert str(summary["frame_len"].dtype) == "float64" and summary["frame_len"][0] == 163.5
    assert str(summary["delay_n"].dtype) == "Int64" and summary["delay_n"][0] == 20 and pd.isna(summary["delay_n"][1])
    assert pd.isna(summary["frame_len"][1]) and pd.isna(summary["tls_version"][1])


def test_one_reader_for_the_report_and_the_notebook(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, payloads=(65,), samples=20)
    assert report_load_bundle is load_bundle
    raw = load(root).raw
    ok = raw.ok_cells[0]
    assert ok.messages is not None and "t_send_us" in ok.messages.columns  # the notebook keeps every column
    report = load_bundle(root).ok_cells[0]
    assert report.messages is not None and "t_send_us" not in report.messages.columns
    assert np.array_equal(report.messages["delay_ms"].to_numpy(), ok.messages["delay_ms"].to_numpy())
    (root / "runs" / "plain-65B-none-r1" / "per_message.csv").write_text("seq,delay_ms\n0,zero\n", encoding="utf-8")
    with pytest.raises(TestbedError, match=r"per_message.csv:2: delay_ms: not a number"):
        load(root)


def test_the_cells_axis_values_are_typed_as_their_axes(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, payloads=(65,), samples=20)
    path = root / "runs" / "tls-65B-none-r1" / "cell.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    spec = RunSpec(scenario="tls", payload=65, samples=20, interval_ms=100.0).model_dump(mode="json")
    path.write_text(json.dumps({**record, "spec": spec, "started_utc": "2026-11-30T02:00:05+00:00"}), encoding="utf-8")
    cells = load(root).cells
    assert {c: str(cells[c].dtype) for c in ("samples", "interval_ms", "qos", "reset_board", "serial_port",
                                                  "publisher", "received")} == {
        "samples": "Int64", "interval_ms": "float64", "qos": "Int64", "reset_board": "boolean",
        "serial_port": "category", "publisher": "category", "received": "Int64"}
    tls = cells.set_index("cell_id").loc["tls-65B-none-r1"]
    assert tls["samples"] == 20 and tls["interval_ms"] == 100.0 and not tls["reset_board"]
    assert tls["started_utc"] == pd.Timestamp("2026-11-30T02:00:05Z") and pd.isna(tls["serial_port"])
    assert pd.isna(cells.set_index("cell_id").loc["plain-65B-none-r1", "samples"])  # no spec kept: missing
    assert cells.attrs["units"] == {"payload": "B", "interval_ms": "ms", "sleep_ms": "ms", "ack_timeout_ms": "ms",
                                    "session_expiry_s": "s", "reconnect_base_ms": "ms", "reconnect_cap_ms": "ms"}


def test_connections_and_devices_of_the_cells_that_have_them(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    make_bundle(root, payloads=(65,), samples=20)
    (root / "runs" / "tls-65B-none-r1" / "connections.csv").write_text(
        "stream,client_ip,client_port,syn_time,tcp_connect_ms,handshake,tls_handshake_ms,payload_client_to_server,"
        "wire_client_to_server,disconnect_seen,close_notify_client,alerts_client,claimed_resumed\n"
        "0,172.18.0.3,40001,1796004407.5865,0.11,full,3.2,2100,3500,True,True,close_notify,\n"
        "1,172.18.0.3,40002,1796004410.25,0.12,resumed-id,1.5,1700,2300,True,,,True\n", encoding="utf-8")
    (root / "runs" / "plain-65B-none-r1" / "devices.csv").write_text(
        "device,sent,received,lost,lost_seqs,lost_at,connected,error,t_start_us,tcp_connect_ms,lag_p99_us\n"
        "0001,20,19,1,7,not on capture,True,,1796004407586500,0.2,310.5\n", encoding="utf-8")
    bundle = load(root)
    conns, devices = bundle.connections, bundle.devices
    assert conns is not None and devices is not None
    assert list(conns["cell_id"].astype(str)) == ["tls-65B-none-r1"] * 2
    assert {c: str(conns[c].dtype) for c in ("client_port", "syn_time", "tcp_connect_ms", "handshake",
                                                 "wire_client_to_server", "disconnect_seen", "claimed_resumed")} \
        == {"client_port": "Int64", "syn_time": "datetime64[ns, UTC]", "tcp_connect_ms": "float64",
            "handshake": "category", "wire_client_to_server": "Int64", "disconnect_seen": "boolean",
            "claimed_resumed": "boolean"}
    assert pd.isna(conns["claimed_resumed"][0]) and bool(conns["claimed_resumed"][1])  # no claim: missing
    assert conns.attrs["units"]["wire_client_to_server"] == "B" and conns.attrs["units"]["tcp_connect_ms"] == "ms"
    assert devices["device"][0] == "0001"  # an id, not the number 1
    assert str(devices["lag_p99_us"].dtype) == "float64" and devices["lag_p99_us"][0] == 310.5  # not rounded
    assert str(devices["t_start_us"].dtype) == "Int64" and devices["t_start_us"][0] == 1796004407586500
    assert bool(devices["connected"][0]) and pd.isna(devices["error"][0])
