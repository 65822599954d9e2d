"""Pieces of the report: document renderers, per-message readers, CSV formatting, atomic writes."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.errors import TestbedError
from orchestrator.report.document import (
    Bullets,
    Figure,
    Heading,
    Paragraph,
    Table,
    render_html,
    render_markdown,
)
from orchestrator.report.loader import per_seq, published_frame_len
from orchestrator.report.order import scenario_order
from orchestrator.report.values import csv_value, num, to_csv
from orchestrator.results.atomic import write_text_atomic

PNG = b"\x89PNG\r\n\x1a\nnot really a picture"


def test_markdown_escapes_table_cells() -> None:
    md = render_markdown([Heading(2, "T"), Table(("a", "b"), (("x|y", "two\nlines"),), "cap")])
    assert "| x\\|y | two lines |" in md
    assert md.startswith("## T\n\n*cap*\n")


def test_html_escapes_text_and_embeds_figures() -> None:
    blocks = [Paragraph("<script>alert(1)</script> & more"), Bullets(("a < b",)),
              Figure("plots/x.png", 'cap "q"', PNG)]
    html = render_html(blocks, title="t & t")
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp; more" in html
    assert "<li>a &lt; b</li>" in html
    encoded = html.split('src="data:image/png;base64,', 1)[1].split('"', 1)[0]
    assert base64.b64decode(encoded) == PNG
    assert "<title>t &amp; t</title>" in html
    md = render_markdown(blocks)
    assert '![cap "q"](plots/x.png)' in md


def test_per_seq_long_layout_prefers_first_copies() -> None:
    df = pd.DataFrame({
        "seq": [0, 0, 1, 2, 2],
        "delay_ms": [9.0, 1.0, 2.0, np.nan, 3.0],
        "dup": ["True", "False", "True", "False", "False"],
    })
    # seq 0: the first copy (1.0), not the duplicate; seq 1: only a duplicate row exists; seq 2: the value
    assert per_seq(df, "delay_ms").tolist() == [1.0, 2.0, 3.0]


def test_per_seq_wide_layout_keeps_messages_that_also_arrived_again() -> None:
    df = pd.DataFrame({"seq": [2, 0, 1], "delay_ms": [0.3, 0.1, 0.2], "dup": [0, 0, 1]})
    assert per_seq(df, "delay_ms").tolist() == [0.1, 0.2, 0.3]


def test_published_frame_len_uses_publisher_leg_and_lone_frames() -> None:
    long = pd.DataFrame({"seq": [0, 0, 1, 1], "frame_len": [163.0, 170.0, 163.0, 170.0],
                         "direction": ["publisher->broker", "broker->subscriber"] * 2})
    assert published_frame_len(long).tolist() == [163.0, 163.0]
    wide = pd.DataFrame({"seq": [0, 1, 2, 3], "frame_len": [357.0, 357.0, 357.0, 163.0],
                         "msgs_in_frame": [3, 3, 3, 1]})
    assert published_frame_len(wide).tolist() == [163.0]


@pytest.mark.parametrize(("value", "text"), [
    (None, "n/a"), (float("nan"), "n/a"), (True, "true"), (3, "3"), (0.1 + 0.2, "0.3"),
    (1e-30, "1e-30"), (4566.834170854271, "4566.834171"), ("x", "x"), (np.float64(21.0), "21"),
])
def test_csv_value(value: object, text: str) -> None:
    assert csv_value(value) == text


def test_to_csv_quotes_and_orders_columns() -> None:
    assert to_csv([{"b": "x,y", "a": None}], ["a", "b"]) == 'a,b\nn/a,"x,y"\n'


def test_num_never_prints_a_signed_zero() -> None:
    assert num(-1e-9, 3, signed=True) == "+0.000"
    assert num(-1e-9, 3) == "0.000"
    assert num(-0.0015, 2, signed=True) == "+0.00"
    assert num(-2.5, 1, signed=True) == "-2.5"
    assert num(None) == "n/a"


def test_scenario_order_puts_baseline_first() -> None:
    assert scenario_order(["tls13", "plain", "tls", "plain"], "plain") == ["plain", "tls", "tls13"]
    assert scenario_order(["tls", "aes"], "plain") == ["aes", "tls"]


def test_atomic_write_error_names_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "plots"
    blocker.write_text("a file where a folder should be", encoding="utf-8")
    with pytest.raises(TestbedError, match=r"plots/x\.png: cannot write"):
        write_text_atomic(blocker / "x.png", "data")


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    write_text_atomic(target, "old")
    write_text_atomic(target, "new")
    assert target.read_text(encoding="utf-8") == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
