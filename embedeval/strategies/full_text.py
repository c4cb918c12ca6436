"""``full-text``: the label of a scorer that reads whole texts, as the lexical baseline does
(:class:`~embedeval.strategies.bm25.BM25Scorer`). Not a ``--strategy``: it is the only way such a
scorer reads."""

from __future__ import annotations

from embedeval.strategies.base import Family, register

FULL_TEXT = "full-text"


@register
class FullText(Family):
    names = (FULL_TEXT,)
    selectable = False
    model_readings = (FULL_TEXT,)
    glossary = "`full-text` a lexical scorer reading everything"
