"""A table -> CSV: the same bytes as ``DataFrame.to_csv(index=False)``, made column-wise and chunk by chunk.

pandas formats a CSV cell by cell (a Python object per cell, then the csv module): 26 s for the 1.5
million rows of a 1000-device capture's packets.csv. Here each column of a chunk of rows is factorized,
only its DISTINCT values are formatted (a port, a flag or a TLS record type is a handful of strings for
the whole chunk), each row's cells are taken from those by code and the chunk is joined in one go. Cells are
formatted as pandas does: floats by numpy's shortest repr (``1.0``, ``1e+16``), integers and text by
``str``, booleans ``True``/``False``, a missing value empty, text quoted as the csv module quotes it
(only when it holds a comma, a quote or a line break). A column of any other type (dates, ...) makes
its chunk go through pandas itself, so nothing is ever written differently.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import numpy as np
import pandas as pd

ROWS_PER_CHUNK = 16384
_NEEDS_QUOTES = (",", '"', "\n", "\r")


class _Unsupported(Exception):
    """A column this writer does not format itself: the chunk is written by pandas."""


def _quote(text: str) -> str:
    if any(c in text for c in _NEEDS_QUOTES):
        return '"' + text.replace('"', '""') + '"'
    return text


def _texts(uniques: np.ndarray, sep: str) -> list[str]:
    """Distinct non-missing values (Python objects) -> their cells (``str``, quoted when needed), each with
    ``sep`` after it."""
    out = [_quote(str(v)) + sep for v in uniques.tolist()]
    if any("\0" in t for t in out):
        raise _Unsupported("a NUL character")
    return out


def _whole(uniques: np.ndarray) -> bool:
    """Float64 values all whole, below 1e15 and none of them -0.0: written as their integer and ``.0``."""
    return bool(len(uniques)) and bool((np.abs(uniques) < 1e15).all()) \
        and bool((np.floor(uniques) == uniques).all()) and not bool((np.signbit(uniques) & (uniques == 0)).any())


def _numeric_texts(uniques: np.ndarray, sep: str) -> list[str]:
    """Distinct numbers -> their cells as pandas writes them (numpy's ``astype(str)``: for a float64 the
    shortest repr, Python's own), each with ``sep`` after it."""
    kind = uniques.dtype.kind
    if kind == "b":
        return ["True" + sep if v else "False" + sep for v in uniques.tolist()]
    if kind == "f" and uniques.dtype.itemsize == 8:
        if _whole(uniques):  # formatting an integer is the faster
            tail = ".0" + sep
            return [f"{v}{tail}" for v in uniques.astype(np.int64).tolist()]
        return [f"{v!r}{sep}" for v in uniques.tolist()]
    if kind in "iu":
        return [f"{v}{sep}" for v in uniques.tolist()]
    raise _Unsupported(str(uniques.dtype))


def _codes_and_texts(col: pd.Series, sep: str) -> tuple[np.ndarray, list[str]]:
    """One column (of one chunk) -> per-row codes into its distinct cells (-1: missing, empty)."""
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        cats = col.cat.categories.to_numpy()
        return codes, (_numeric_texts(cats, sep) if cats.dtype.kind in "fiub" else _texts(cats, sep))
    values = col.array
    if isinstance(values, pd.arrays.IntegerArray | pd.arrays.FloatingArray | pd.arrays.BooleanArray):
        data = values._data  # noqa: SLF001 - the values behind the mask, to format as numbers
        codes, uniques = pd.factorize(data)
        codes = np.where(values._mask, -1, codes)  # noqa: SLF001
        return codes, _numeric_texts(uniques, sep)
    arr = col.to_numpy()
    if arr.dtype.kind in "fiub":
        codes, uniques = pd.factorize(arr)  # NaN -> -1
        return codes, _numeric_texts(uniques, sep)
    if arr.dtype.kind == "O" or isinstance(dtype, pd.StringDtype):
        codes, uniques = pd.factorize(col)  # None / NaN / NA -> -1
        return codes, _texts(np.asarray(uniques, dtype=object), sep)
    raise _Unsupported(str(dtype))


def _rows(part: pd.DataFrame) -> bytes:
    """The CSV rows of one chunk: a (rows x columns) table of each cell's text and its separator, taken
    from each column's distinct cells by code, joined once in row order."""
    ncols = len(part.columns)
    table = np.empty((len(part), ncols), dtype=object)
    for j, name in enumerate(part.columns):
        sep = "\n" if j == ncols - 1 else ","
        codes, texts = _codes_and_texts(part[name], sep)
        texts.append(sep)  # the last one: a missing value
        table[:, j] = np.array(texts, dtype=object)[codes]  # code -1 takes the last
    return "".join(table.ravel().tolist()).encode("utf-8")


def csv_chunks(df: pd.DataFrame, rows: int = ROWS_PER_CHUNK) -> Iterator[bytes]:
    """``df.to_csv(index=False)`` encoded as UTF-8, in pieces of ``rows`` rows (the header first)."""
    if len(df.columns) < 2 or len(df) == 0:  # pandas quotes a lone empty cell; nothing to gain either way
        yield df.to_csv(index=False).encode("utf-8")
        return
    head = io.StringIO()
    csv.writer(head, lineterminator="\n").writerow([str(c) for c in df.columns])
    yield head.getvalue().encode("utf-8")
    for begin in range(0, len(df), rows):
        part = df.iloc[begin:begin + rows]
        try:
            yield _rows(part)
        except _Unsupported:
            yield part.to_csv(index=False, header=False).encode("utf-8")

