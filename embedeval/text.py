"""Plain-text helpers shared by haystack building and corpus chunking: sentence splitting."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'’”)\]])\s+|\n\s*\n")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (split after . ! ? and at blank lines), whitespace collapsed."""
    sentences = (" ".join(part.split()) for part in _SENTENCE_END.split(text))
    return [s for s in sentences if s]
