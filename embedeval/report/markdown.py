"""The report as Markdown (``report.md``): a :class:`~embedeval.report.sections.Document` with
figures linked from ``figures/``."""

from __future__ import annotations

import pandas as pd

from embedeval.report.sections import Block, Bullets, Callout, Document, Figure, Table, Text, format_cell


def markdown_table(frame: pd.DataFrame, digits: int = 3) -> str:
    """A GitHub-flavoured markdown table."""
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(format_cell(v, digits) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def markdown_block(block: Block) -> str:
    """One block of a report as Markdown (a callout as a block quote, its headline in bold)."""
    if isinstance(block, Text):
        return block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Table):
        return markdown_table(block.frame, block.digits)
    if isinstance(block, Figure):
        return f"![{block.alt}]({block.path})"
    if isinstance(block, Callout):  # a block quote: the headline in bold, then its points
        return "\n".join([f"> **{block.headline}**", ">", *(f"> - {item}" for item in block.items)])
    raise TypeError(f"not a report block: {block!r}")


def render_markdown(document: Document) -> str:
    """``# title``, the intro, then each section as ``## title`` with its blocks, blank lines
    between."""
    parts = [f"# {document.title}", *(markdown_block(b) for b in document.intro)]
    for section in document.sections:
        parts += [f"## {section.title}", *(markdown_block(b) for b in section.blocks if not (isinstance(b, Bullets) and not b.items))]
    return "\n\n".join(parts) + "\n"
