"""What the similarity and rank tables are computed from: a :class:`Scorer` (an embedder read
through a strategy, :class:`~embedeval.strategies.scorers.EmbeddingScorer`, or the lexical
baseline, :class:`~embedeval.strategies.bm25.BM25Scorer`) reads texts (:class:`ScoredTexts`) and
scores queries against them (:class:`Scores`); :class:`Reading` says what its last ``index`` read.
Scoring sits above the embedders: nothing in :mod:`embedeval.embedders` imports it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Reading:
    """What a scorer's last ``index`` read and what reading it took (the decision table's costs,
    :mod:`embedeval.decision`). ``tokens_read[t]``: the tokens the model reads of text ``t``, its
    inputs' tokens (a token in two overlapping windows counted twice; None: every token of every
    text, as the lexical scorer reads them); ``seconds``: the wall seconds the model spent on what
    it embedded (cache misses only; None: not measured), ``tokens``: the tokens of those inputs
    (None: those of every text, ``tokens_read``'s)."""

    tokens_read: np.ndarray | None
    seconds: float | None
    tokens: int | None = None


@dataclass
class Scores:
    """Scores of ``n_queries`` queries against ``n_texts`` indexed texts, each ``(n_queries, n_texts)``.

    ``values[q, t]``: the score (a cosine for embedders, BM25 for the lexical baseline);
    ``best_piece[q, t]``: the piece of text ``t`` that gave it (its chunk index; 0 when texts are
    scored whole); ``best_start``/``best_end``: that piece's character span in text ``t``.
    """

    values: np.ndarray
    best_piece: np.ndarray
    best_start: np.ndarray
    best_end: np.ndarray

    @classmethod
    def whole(cls, values: np.ndarray, seen_chars: np.ndarray) -> Scores:
        """Scores of texts read as one piece: piece 0, spanning the characters the scorer read."""
        values = np.asarray(values, dtype=np.float64)
        shape = values.shape
        return cls(values, np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64),
                   np.broadcast_to(np.asarray(seen_chars, dtype=np.int64), shape).copy())


class ScoredTexts(Protocol):
    """Texts a :class:`Scorer` has read, ready to be scored against queries.

    ``seen_chars[t]``: how many characters of text ``t`` (from its start) the scorer read:
    ``len(text)`` unless the model truncated it. ``scores(queries)`` -> :class:`Scores`.
    """

    seen_chars: np.ndarray

    def scores(self, queries: Sequence[str]) -> Scores: ...


@runtime_checkable
class Scorer(Protocol):
    """Scores (query, text) pairs: an embedder read through a long-text strategy, or a lexical
    baseline. What the similarity and rank tables are computed from.

    - ``name``: the ``embedder`` column; ``strategy``: the ``strategy`` column.
    - ``windows_exact``: whether the text was cut on the model's own token ids (False: windows or
      truncation estimated with a reference tokenizer, as for API models).
    - ``normalizable``: whether sim(query, bare needle) is on the same scale as sim(query,
      haystack), so that ``normalized`` means something (not for BM25, whose scores depend on
      the corpus and the document length).
    - ``index(texts, partition)``: read the texts. Texts with equal ``partition`` values form one
      corpus (the lexical scorer's IDF comes from it; embedders ignore it).
    """

    name: str
    strategy: str
    windows_exact: bool
    normalizable: bool

    def index(self, texts: Sequence[str], partition: Sequence | None = None) -> ScoredTexts: ...
