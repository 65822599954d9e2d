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
class Link:
    """Text that links to a section of the same report (by its heading's text)."""

    text: str
    section: str


CellText = str | Link
Inline = str | tuple[CellText, ...]  # text, or text and links in a row


@dataclass(frozen=True)
class Paragraph:
    text: Inline


@dataclass(frozen=True)
class Bullets:
    items: tuple[Inline, ...]


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[CellText, ...], ...]
    caption: str | None = None


@dataclass(frozen=True)
class Figure:
    filename: str  # relative to the bundle: plots/<name>.png
    caption: str
    png: bytes


Block = Heading | Paragraph | Bullets | Table | Figure

__all__ = ["Block", "Bullets", "CellText", "Figure", "Heading", "Inline", "Link", "Paragraph", "Table", "anchor",
           "render_html", "render_markdown"]

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #444;padding-bottom:.2em}h2{border-bottom:1px solid #bbb;margin-top:2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.86em;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:.25em .4em;text-align:left;vertical-align:top}
th{background:#f0f0f0}tr:nth-child(even) td{background:#fafafa}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.9em;color:#444}code{background:#f4f4f4;padding:0 .2em}
""".strip()


def anchor(heading: str) -> str:
    """The id of a heading as GitHub makes it from the text (lower case, punctuation dropped, spaces to
    hyphens); report.html gives its headings the same ids, so one link works in both files."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


# Long words (identifiers such as cell ids, metric names, digests) may break after these characters, so a
# table column is never wider than its longest word would make it.
_BREAK_AFTER = "_/,:=."
_LONG_WORD = 16


def _breakable(text: str) -> str:
    """HTML-escaped ``text`` with <wbr> after the separators of each word longer than _LONG_WORD."""
    words = []
    for word in text.split(" "):
        escaped = html.escape(word)
        if len(word) > _LONG_WORD:
            escaped = "".join(html.escape(ch) + ("<wbr>" if ch in _BREAK_AFTER else "") for ch in word)
        words.append(escaped)
    return " ".join(words)


def _md_cell(value: CellText) -> str:
    if isinstance(value, Link):
        return f"[{_md_cell(value.text)}](#{anchor(value.section)})"
    return value.replace("|", "\\|").replace("\n", " ")


def _html_cell(value: CellText) -> str:
    if isinstance(value, Link):  # a figure: it breaks where its text has spaces, never inside a number
        return f'<a href="#{anchor(value.section)}">{html.escape(value.text)}</a>'
    return _breakable(value)


def _md_inline(text: Inline) -> str:
    if isinstance(text, str):
        return text
    return "".join(f"[{part.text}](#{anchor(part.section)})" if isinstance(part, Link) else part for part in text)


def _html_inline(text: Inline) -> str:
    if isinstance(text, str):
        return html.escape(text)
    return "".join(f'<a href="#{anchor(p.section)}">{html.escape(p.text)}</a>' if isinstance(p, Link)
                   else html.escape(p) for p in text)


def render_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(_md_inline(block.text))
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {_md_inline(item)}" for item in block.items))
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
            target = "" if block.level == 1 else f'<a id="{anchor(block.text)}"></a>'
            body.append(f"{target}<h{block.level}>{esc(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_html_inline(block.text)}</p>")
        elif isinstance(block, Bullets):
            body.append("<ul>" + "".join(f"<li>{_html_inline(item)}</li>" for item in block.items) + "</ul>")
        elif isinstance(block, Table):
            caption = f"<caption>{esc(block.caption)}</caption>" if block.caption else ""
            head = "".join(f"<th>{esc(c)}</th>" for c in block.columns)
            rows = "".join(
                "<tr>" + "".join(f"<td>{_html_cell(v)}</td>" for v in row) + "</tr>" for row in block.rows
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
