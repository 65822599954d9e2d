"""Where the export is cut into chunks changes nothing: the tables put together column by column (each
chunk's pieces freed as they are used) equal those of one chunk, types included.

The cut points are made here, from the whole export: how tshark's output arrives in blocks (and so
where ``export_chunks`` cuts it) depends on timing, and a CI run once got only five pieces. How
``_whole_lines`` cuts streamed blocks is tested in test_one_pass and test_analysis_parsing."""

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

    def small(request, handle):  # noqa: ANN001, ANN202 - export_chunks, its text re-cut into ~4 KiB whole lines
        def recut(text: str) -> None:
            piece = ""
            for line in text.splitlines(keepends=True):
                piece += line
                if len(piece) >= 4096:
                    seen.append(len(piece))
                    handle(piece)
                    piece = ""
            if piece:
                seen.append(len(piece))
                handle(piece)
        return export_chunks(request, recut, chunk_bytes=1 << 30)

    whole = analyse_run(inputs, functools.partial(export_chunks, chunk_bytes=1 << 30))
    cut = analyse_run(inputs, small)
    assert len(seen) > 20  # really cut, into many pieces
    pd.testing.assert_frame_equal(cut.per_packet, whole.per_packet, check_exact=True)
    pd.testing.assert_frame_equal(cut.per_message, whole.per_message, check_exact=True)
    assert metrics_json(cut.metrics) == metrics_json(whole.metrics)
    assert cut.per_packet.to_csv(index=False) == whole.per_packet.to_csv(index=False)
