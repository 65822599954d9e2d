"""Analysis is handed its exporter: it starts no program, and any exporter giving tshark's text gives the same run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.analysis import RunInputs, analyse_run
from orchestrator.analysis.fields import ExportOutcome, ExportRequest
from orchestrator.analysis.pipeline import metrics_json
from orchestrator.backends.tshark import export_chunks, export_fields
from orchestrator.errors import ToolError


def _inputs(ref: Path) -> RunInputs:
    return RunInputs(pcap=ref / "lat_t12chacha.pcap", broker_port=8883, tls=True, samples_expected=200,
                     payload_bytes=100, keylogs=[ref / "lat_t12chacha.keys.log"],
                     expected_tls=("TLS 1.2", 0xCCA8))


def test_a_replayed_export_in_small_chunks_gives_the_same_run(ref: Path) -> None:
    inputs = _inputs(ref)
    lines = export_fields(inputs.export_request()).splitlines(keepends=True)
    asked: list[ExportRequest] = []

    def replay(request: ExportRequest, handle: Callable[[str], None]) -> ExportOutcome:
        asked.append(request)
        for i in range(0, len(lines), 97):  # many chunks: frames split across parse calls
            handle("".join(lines[i:i + 97]))
        return ExportOutcome(["replay"], 0, "")

    replayed = analyse_run(inputs, replay)
    streamed = analyse_run(inputs, export_chunks)
    assert asked == [ExportRequest(inputs.pcap, 8883, True, (ref / "lat_t12chacha.keys.log",))]
    assert len(lines) > 97 * 5
    pd.testing.assert_frame_equal(replayed.per_packet, streamed.per_packet)
    pd.testing.assert_frame_equal(replayed.per_message, streamed.per_message)
    assert metrics_json(replayed.metrics) == metrics_json(streamed.metrics)


def test_an_export_that_fails_on_a_sound_capture_is_a_tool_error(ref: Path) -> None:
    def failing(request: ExportRequest, handle: Callable[[str], None]) -> ExportOutcome:
        return ExportOutcome(["tshark", "-r", str(request.pcap)], 1, "tshark: something broke\n")

    with pytest.raises(ToolError, match="tshark could not read .*lat_t12chacha.pcap \\(exit 1\\)") as err:
        analyse_run(_inputs(ref), failing)
    assert err.value.returncode == 1
    assert "something broke" in (err.value.evidence or "")
