"""analysis/csvout.py writes exactly the bytes ``DataFrame.to_csv(index=False)`` writes, in chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import SAMPLES, VARIANTS, convert_reference_csv

from orchestrator.analysis import RunInputs, analyse_run, write_run_outputs
from orchestrator.analysis.csvout import csv_chunks
from orchestrator.backends.tshark import export_chunks
from orchestrator.results.atomic import write_chunks_atomic


def _ours(df: pd.DataFrame, rows: int) -> bytes:
    return b"".join(csv_chunks(df, rows=rows))


def _theirs(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode("utf-8")


def _every_kind() -> pd.DataFrame:
    floats = [1.0, np.nan, 1e16, 1e-05, -0.0, 1700000000.1234567, np.inf, -np.inf, 5e-324, 0.1, 2.5, 1e15 + 0.5]
    n = len(floats)
    return pd.DataFrame({
        "frame": np.arange(n, dtype=np.int64) * 1_000_003,
        "time": floats,
        "port": [1883.0, 8883.0, np.nan] * (n // 3),  # whole floats with gaps: "1883.0" and empty
        "zero": [0.0, -0.0, 3.0, np.nan] * (n // 4),  # whole, but "-0.0" is no integer's
        "big": np.array([2**32 - 1, 0] * (n // 2), dtype=float),
        "flag": [True, False] * (n // 2),
        "n": pd.array([1, None, -3] * (n // 3), dtype="Int64"),
        "ms": pd.array([0.25, None, 1e16, 3.0] * (n // 4), dtype="Float64"),
        "cat": pd.Categorical(["23|23", None, "22", "a,b", 'say "hi"', "é"] * (n // 6)),
        "cat_num": pd.Categorical([1.5, 2.0, None] * (n // 3)),
        "text": pd.Series(["plain", None, "line\nbreak", "", "cr\rhere", "ünï"] * (n // 6), dtype=object),
        "str": pd.Series(["x", None, "y,z"] * (n // 3), dtype="str"),
        "u8": np.arange(n, dtype=np.uint8),
        "f32": np.linspace(0, 1, n, dtype=np.float32),
    })


@pytest.mark.parametrize("rows", [1, 5, 10_000])
def test_every_kind_of_column_as_pandas_writes_it(rows: int) -> None:
    df = _every_kind()
    assert _ours(df, rows) == _theirs(df)


def test_a_column_it_does_not_format_goes_through_pandas() -> None:
    df = pd.DataFrame({"when": pd.date_range("2026-01-01", periods=4, freq="h"), "v": [1, 2, 3, 4],
                       "nul": ["a\0b", "c", "d", "e"]})
    assert _ours(df, 3) == _theirs(df)


@pytest.mark.parametrize("df", [pd.DataFrame({"only": ["", "x", None]}), pd.DataFrame({"a": [], "b": []}),
                                pd.DataFrame({"a,b": [1], 'q"': [2]})], ids=["one column", "no rows", "headers"])
def test_edge_tables(df: pd.DataFrame) -> None:
    assert _ours(df, 2) == _theirs(df)


def test_an_analysed_run_is_written_as_pandas_writes_it(ref: Path, tmp_path: Path) -> None:
    """The real tables (categoricals, nullable ints, floats with gaps) of a TLS reference capture."""
    port, tls, keylog, expected = VARIANTS["t12chacha"]
    pub, sub = convert_reference_csv(ref / "lat_t12chacha_65.csv", tmp_path)
    result = analyse_run(RunInputs(pcap=ref / "lat_t12chacha.pcap", broker_port=port, tls=tls,
                                   samples_expected=SAMPLES[65], payload_bytes=65, keylogs=[ref / keylog],
                                   publisher_log=pub, subscriber_log=sub, expected_tls=expected), export_chunks)
    paths = write_run_outputs(result, tmp_path / "out")
    assert paths["packets"].read_bytes() == _theirs(result.per_packet)
    assert paths["per_message"].read_bytes() == _theirs(result.per_message)
    assert len(result.per_packet) > 1000  # several chunks at 500 rows
    assert _ours(result.per_packet, 500) == _theirs(result.per_packet)


def test_a_write_stopped_midway_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    """The outputs are written as their chunks come: Ctrl-C (or a failing chunk) between two chunks."""
    path = tmp_path / "packets.csv"
    path.write_text("old\n")

    def chunks():  # noqa: ANN202
        yield b"new,"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_chunks_atomic(path, chunks())
    assert path.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [path]
