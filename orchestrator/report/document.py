"""A small document model rendered to Markdown and to one self-contained HTML file.

The report is built once as a list of blocks; both renderers walk the same list, so report.md
and report.html say the same thing. HTML embeds figures as base64 PNG and has inline CSS and no
external reference of any kind.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str | None = None


@dataclass(frozen=True)
class Figure:
    filename: str  # relative to the bundle: plots/<name>.png
    caption: str
    png: bytes


Block = Heading | Paragraph | Bullets | Table | Figure

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #444;padding-bottom:.2em}h2{border-bottom:1px solid #bbb;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.86em;display:block;overflow-x:auto}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0}tr:nth-child(even) td{background:#fafafa}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.9em;color:#444}code{background:#f4f4f4;padding:0 .2em}
""".strip()


def _md_cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            lines = [f"*{block.caption}*", ""] if block.caption else []
            lines.append("| " + " | ".join(_md_cell(c) for c in block.columns) + " |")
            lines.append("|" + "---|" * len(block.columns))
            lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Figure):
            out.append(f"![{block.caption}]({block.filename})\n\n*{block.caption}*")
    return "\n\n".join(out) + "\n"


def render_html(blocks: Sequence[Block], title: str) -> str:
    esc = html.escape
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{esc(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{esc(block.text)}</p>")
        elif isinstance(block, Bullets):
            body.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in block.items) + "</ul>")
        elif isinstance(block, Table):
            caption = f"<caption>{esc(block.caption)}</caption>" if block.caption else ""
            head = "".join(f"<th>{esc(c)}</th>" for c in block.columns)
            rows = "".join(
                "<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in block.rows
            )
            body.append(f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Figure):
            data = base64.b64encode(block.png).decode("ascii")
            body.append(
                f'<figure><img alt="{esc(block.caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(block.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{esc(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
