"""The report as one self-contained HTML file (``report.html``): the same
:class:`~embedeval.report.sections.Document` as ``report.md``, figures inlined as base64 PNGs,
styles inline, no script, font or request outside the file. Wide tables scroll inside their box,
and each contents entry holds its number beside its title (:func:`contents`), so the page reads at
1280 px and on a phone-sized viewport alike."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from embedeval.report.sections import Block, Bullets, Callout, Document, Figure, Table, Text, format_cell

STYLE = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; line-height: 1.5;
       color: #1d1d1f; background: #fff; margin: 0 auto; max-width: 72rem; padding: 1rem 1.25rem 3rem; }
h1 { font-size: 1.6rem; margin: 0.5rem 0 1rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 0.6rem; padding-top: 0.6rem; border-top: 1px solid #ddd; }
nav ol { list-style: none; columns: 2 18rem; column-gap: 2rem; padding: 0; margin: 0 0 1rem; }
nav li { display: flex; align-items: baseline; gap: 0.4em; break-inside: avoid; }
nav li > span { flex: none; min-width: 1.6em; text-align: right; font-variant-numeric: tabular-nums; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; background: #f3f3f5;
       padding: 0.05em 0.3em; border-radius: 3px; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; max-width: 100%; margin: 0.6rem 0 1rem; border: 1px solid #e3e3e8; border-radius: 4px; }
table { border-collapse: collapse; font-size: 0.85rem; font-variant-numeric: tabular-nums; }
th, td { padding: 0.3rem 0.55rem; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #f7f7f9; position: sticky; top: 0; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 0.8rem 0 1.2rem; }
img { max-width: 100%; height: auto; display: block; }
p, li { overflow-wrap: anywhere; }
.answer { border-left: 4px solid #2f6fb3; background: #f2f6fb; padding: 0.6rem 1rem; margin: 0 0 1rem; border-radius: 0 4px 4px 0; }
.answer p { margin: 0 0 0.3rem; font-size: 1.05rem; }
.answer ul { margin: 0; padding-left: 1.2rem; }
"""

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def inline(text: str) -> str:
    """Text escaped for HTML, with ```code``` and ``**bold**`` marked up."""
    escaped = html.escape(text, quote=False)
    return _BOLD.sub(r"<strong>\1</strong>", _CODE.sub(r"<code>\1</code>", escaped))


def anchor(title: str) -> str:
    """The id of a section: its title in lower case, runs of other characters as one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def html_table(table: Table) -> str:
    frame = table.frame
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(format_cell(v, table.digits))}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def _block(block: Block, folder: Path) -> str:
    if isinstance(block, Text):
        return f"<p>{inline(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{inline(item)}</li>" for item in block.items) + "</ul>" if block.items else ""
    if isinstance(block, Table):
        return html_table(block)
    if isinstance(block, Callout):
        items = "".join(f"<li>{inline(item)}</li>" for item in block.items)
        return f'<aside class="answer"><p><strong>{inline(block.headline)}</strong></p><ul>{items}</ul></aside>'
    if isinstance(block, Figure):
        data = base64.b64encode((folder / block.path).read_bytes()).decode("ascii")
        return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(block.alt)}" loading="eager">'
                "</figure>")
    raise TypeError(f"not a report block: {block!r}")


def contents(document: Document) -> str:
    """The contents: a numbered link to each section. Each number is text in its own box beside its
    title (a wrapped title stays clear of it, and of the next column), not a list marker hanging
    in the gap between the columns."""
    entries = "".join(f'<li><span>{number}.</span> <a href="#{anchor(section.title)}">{inline(section.title)}</a></li>'
                      for number, section in enumerate(document.sections, start=1))
    return f"<nav><ol>{entries}</ol></nav>"


def render_html(document: Document, folder: Path) -> str:
    """The whole page; figures are read from ``folder`` (the run directory) and inlined."""
    folder = Path(folder)
    body = [f"<h1>{inline(document.title)}</h1>", *(_block(b, folder) for b in document.intro), contents(document)]
    for section in document.sections:
        body.append(f'<section><h2 id="{anchor(section.title)}">{inline(section.title)}</h2>')
        body += [_block(b, folder) for b in section.blocks]
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<link rel=\"icon\" href=\"data:,\">\n"  # no favicon request either
            f"<title>{html.escape(document.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
