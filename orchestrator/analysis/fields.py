"""The exported fields of a capture, parsed into a table.

Analysis never starts a program: it is handed a FieldExporter (orchestrator/model/export.py says what
one is and the text format it gives; backends/tshark.py runs tshark) and parses the text here.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd

from orchestrator.errors import TestbedError
from orchestrator.model.export import (  # noqa: F401 - the analysis' names for them
    AGGREGATOR,
    FIELD_NAMES,
    FIELDS,
    ExportOutcome,
    ExportRequest,
    FieldExporter,
)

NUMERIC = ("frame", "time", "frame_len", "ip_hdr_len", "stream", "src_port", "dst_port", "tcp_hdr_len",
           "tcp_len", "tcp_seq", "tcp_ack")


def _empty_table(names: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64" if c in NUMERIC else object) for c in names})


def _read_table(text: str, names: list[str]) -> pd.DataFrame:
    dtypes: dict[str, object] = {c: object for c in names}
    dtypes.update({c: "float64" for c in NUMERIC})
    dtypes.update({"frame": "int64", "frame_len": "int64"})
    common = dict(sep="\t", header=None, names=names, keep_default_na=False, quoting=3, engine="c")
    try:
        return pd.read_csv(io.StringIO(text), dtype=dtypes, na_values={c: [""] for c in NUMERIC}, **common)
    except ValueError:
        # a numeric field repeated in some frame (e.g. ICMP quoting a TCP header): keep its first value
        df = pd.read_csv(io.StringIO(text), dtype=object, na_filter=False, **common)
        for col in NUMERIC:
            first = df[col].str.split(AGGREGATOR, regex=False).str[0]
            df[col] = pd.to_numeric(first, errors="coerce")
        df["frame"] = df["frame"].astype("int64")
        df["frame_len"] = df["frame_len"].astype("int64")
        return df


def parse_fields(text: str) -> pd.DataFrame:
    """The exported text -> per-packet DataFrame (multi-valued columns stay strings)."""
    names = [c for c, _ in FIELDS]
    if not text.strip():
        return _empty_table(names)
    first = text[:text.find("\n")] if "\n" in text else text
    if first.count("\t") != len(names) - 1:
        raise TestbedError(f"tshark printed {first.count(chr(9)) + 1} columns, expected {len(names)}",
                           evidence=first[:300])
    df = _read_table(text, names)
    flags = df["tcp_flags"]
    table = {v: (int(v.split(AGGREGATOR)[0], 16) if v else -1) for v in flags.unique()}
    df["tcp_flags"] = flags.map(table).astype("int64")
    df["retrans"] = (df["retrans"] != "") | (df["fast_retrans"] != "")
    df["fast_retrans"] = df["fast_retrans"] != ""
    return df
