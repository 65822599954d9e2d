"""The exported fields of a capture, parsed into a table.

Analysis never starts a program: it is handed a FieldExporter (orchestrator/model/export.py says what
one is and the text format it gives; backends/tshark.py runs tshark) and parses the text here.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd
from pandas.api.types import union_categoricals

from orchestrator.errors import TestbedError
from orchestrator.model.export import (  # noqa: F401 - the analysis' names for them
    AGGREGATOR,
    FIELD_NAMES,
    FIELDS,
    ExportOutcome,
    ExportRequest,
    FieldExporter,
)

# Text columns with few distinct values, held as categoricals: a small code per row instead of a pointer
# (and the same text either way: what is written out does not change)
CATEGORICAL = ("ip_src", "ip_dst", "ipv6_src", "ipv6_dst", "sack_le", "sack_re", "tls_ctype", "tls_opaque",
               "tls_rec_len", "tls_hs_type", "tls_cipher", "tls_sup_ver", "tls_hs_ver", "mqtt_type", "mqtt_len")
NUMERIC = ("frame", "time", "frame_len", "ip_hdr_len", "stream", "src_port", "dst_port", "tcp_hdr_len",
           "tcp_len", "tcp_seq", "tcp_ack")


def _empty_table(names: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64" if c in NUMERIC else object) for c in names})


def _read_table(text: str, names: list[str]) -> pd.DataFrame:
    dtypes: dict[str, object] = {c: object for c in names}
    dtypes.update({c: "float64" for c in NUMERIC})
    dtypes.update({"frame": "int64", "frame_len": "int64"})
    # read so: cheaper than text converted later (the flags' few values become numbers and booleans below)
    dtypes.update({c: "category" for c in (*CATEGORICAL, "tcp_flags", "retrans", "fast_retrans") if c in names})
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
    """The exported text -> per-packet DataFrame (multi-valued columns stay text; :data:`CATEGORICAL` ones
    as categoricals, except where a repeated numeric field made the parse fall back to text everywhere)."""
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


def compact(part: pd.DataFrame, drop: Sequence[str] = ()) -> pd.DataFrame:
    """A parsed table without the columns ``drop`` and with its :data:`CATEGORICAL` columns as categoricals."""
    part = part.drop(columns=list(drop))
    return part.astype({c: "category" for c in CATEGORICAL if c in part})


Columns = dict[str, pd.Series]


def own_columns(part: pd.DataFrame) -> Columns:
    """A chunk's table as its columns, each in memory of its own (not a slice of a block it shares with the
    table's other columns of its type): :func:`concat_tables` frees each as soon as it has used it."""
    return {name: part[name].copy() for name in part.columns}


def _rows(part: Columns) -> int:
    return len(next(iter(part.values()))) if part else 0


def concat_tables(parts: list[Columns], keep_empty: bool = False) -> pd.DataFrame:
    """Tables of consecutive chunks, one after the other, made column by column: ``parts`` is emptied as it
    goes, a column's pieces freed once it is made (so the whole never sits in memory twice). A categorical
    column stays one, its categories the sorted union of the parts' (so the result does not depend on where
    the chunks were cut). Empty parts are left out (an empty part's categories have no type) unless
    ``keep_empty`` (then the types are those ``pd.concat`` of the tables gives)."""
    if not keep_empty:
        parts[:] = [p for p in parts if _rows(p)] or parts[:1]
    names = list(parts[0])
    out = pd.DataFrame(index=pd.RangeIndex(sum(_rows(p) for p in parts)))
    for name in names:
        column = [p.pop(name) for p in parts]
        if len(column) == 1:
            out[name] = column[0].array
        elif all(isinstance(c.dtype, pd.CategoricalDtype) for c in column):
            out[name] = union_categoricals(column, sort_categories=True)
        else:
            out[name] = pd.concat(column, ignore_index=True).array
        del column
    parts.clear()
    return out
