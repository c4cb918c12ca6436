"""The generated blocks of the documentation: text a script writes into a Markdown page (README.md,
docs/*.md) between the markers ``<!-- example:NAME -->`` and ``<!-- /example:NAME -->``, each on a
line of its own, so what a page shows of a run or a benchmark is that script's output, not a copy.

A script renders its blocks (name -> text) and writes them with :func:`write_blocks`; a test reads a
page's blocks with :func:`read_blocks` and compares them with what the script renders now, and looks
at the rest of a page with :func:`without_blocks`. Used by ``docs/make_default_run_docs.py``; the
markers are those ``docs/make_themes_example.py`` writes into docs/themes.md.
"""

from __future__ import annotations

import re

#: One block: its name, then its text (the lines between the two markers; empty for an empty block).
#: A marker counts on a line of its own only (a page may name the markers in its text).
BLOCK = re.compile(r"^<!-- example:(\S+) -->\n(.*?)\n?^<!-- /example:\1 -->$", re.S | re.M)
OPENING, CLOSING = re.compile(r"^<!-- example:(\S+) -->$", re.M), re.compile(r"^<!-- /example:(\S+) -->$", re.M)


def markers(name: str) -> tuple[str, str]:
    """The opening and closing marker of block ``name``."""
    return f"<!-- example:{name} -->", f"<!-- /example:{name} -->"


def read_blocks(page: str, where: str = "the page") -> dict[str, str]:
    """Every block of ``page``, name -> text, in the order they stand; a block named twice, or a marker
    without its pair, is a ValueError naming ``where``."""
    found: dict[str, str] = {}
    for match in BLOCK.finditer(page):
        if match[1] in found:
            raise ValueError(f"{where} has block {match[1]} twice")
        found[match[1]] = match[2]
    opened, closed = OPENING.findall(page), CLOSING.findall(page)
    if sorted(opened) != sorted(found) or sorted(closed) != sorted(found):
        unpaired = sorted(set(opened) ^ set(closed) | {name for name in opened + closed if name not in found})
        raise ValueError(f"{where} has markers without their pair: {', '.join(unpaired)}")
    return found


def write_blocks(page: str, blocks: dict[str, str], where: str = "the page") -> str:
    """``page`` with each block's text between its markers (the markers stay); a block of ``blocks``
    whose markers the page lacks is a ValueError naming ``where``."""
    read_blocks(page, where)  # markers in pairs, each block once
    for name, text in blocks.items():
        opening, closing = markers(name)
        pattern = re.compile(rf"^({re.escape(opening)}\n).*?\n?^({re.escape(closing)})$", re.S | re.M)
        if not pattern.search(page):
            raise ValueError(f"{where} has no {opening} ... {closing} markers")
        page = pattern.sub(lambda m, text=text: m[1] + (text + "\n" if text else "") + m[2], page, count=1)
    return page


def without_blocks(page: str) -> str:
    """``page`` with every block's text left out (its markers too): what was written by hand."""
    return BLOCK.sub("", page)
