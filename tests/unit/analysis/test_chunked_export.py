"""Where the export is cut into chunks changes nothing: the tables put together column by column (each
chunk's pieces freed as they are used) equal those of one chunk, types included."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
from analysis_helpers import SAMPLES, VARIANTS, convert_reference_csv

from orchestrator.analysis import RunInputs, analyse_run
from orchestrator.analysis.pipeline import metrics_json
from orchestrator.backends.tshark import export_chunks


def test_many_small_chunks_give_the_tables_of_one(ref: Path, tmp_path: Path) -> None:
    port, tls, keylog, expected = VARIANTS["t12chacha"]
    pub, sub = convert_reference_csv(ref / "lat_t12chacha_100.csv", tmp_path)
    inputs = RunInputs(pcap=ref / "lat_t12chacha.pcap", broker_port=port, tls=tls, samples_expected=SAMPLES[100],
                       payload_bytes=100, keylogs=[ref / keylog], publisher_log=pub, subscriber_log=sub,
                       expected_tls=expected)
    seen: list[int] = []

    def small(request, handle):  # noqa: ANN001, ANN202 - export_chunks, its chunks counted
        return export_chunks(request, lambda text: (seen.append(len(text)), handle(text))[1], chunk_bytes=4096)

    whole = analyse_run(inputs, functools.partial(export_chunks, chunk_bytes=1 << 30))
    cut = analyse_run(inputs, small)
    assert len(seen) > 5  # really cut, into several pieces
    pd.testing.assert_frame_equal(cut.per_packet, whole.per_packet, check_exact=True)
    pd.testing.assert_frame_equal(cut.per_message, whole.per_message, check_exact=True)
    assert metrics_json(cut.metrics) == metrics_json(whole.metrics)
    assert cut.per_packet.to_csv(index=False) == whole.per_packet.to_csv(index=False)
