"""BM25, the lexical baseline: a :class:`~embedeval.strategies.scoring.Scorer` that ranks texts by the
query words they contain, through the ``bm25s`` library (numbers are the library's own).

Texts and queries are tokenised the same way, by ``bm25s.tokenize``: lower-cased words of two or
more letters or digits, English stop words dropped, each word reduced to its PyStemmer English
stem. The stop words are ``bm25s``'s ``"en"`` list, Lucene's 33 words ("a", "the", "is", "it",
"and", "of", ...): question words ("which", "who", "what") and "has", "been" are kept, and count
as query terms. With ``bm25s``'s default ``"lucene"`` variant, over a corpus of ``N``
texts of mean length ``avgdl`` (in tokens), a term ``t`` found in ``df(t)`` texts weighs::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over the query's terms t of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

where ``tf(t, d)`` counts ``t`` in text ``d`` and ``|d|`` is its length in tokens; a term repeated
in the query counts once per occurrence, and a term no text of the corpus contains adds nothing.

**Partitions.** ``index(texts, partition)`` takes one value per text; texts with equal values form
one corpus, with its own ``N``, ``avgdl`` and ``df`` (for example one corpus per haystack length,
so that an 8k-token haystack is not judged against 128-token ones). A text's score is computed in
its own partition only; scores from different partitions are not on one scale. ``partition=None``:
all texts form one corpus.

BM25 reads each text whole (no window, no truncation), so a score is that of the whole text, and it
is not ``normalizable``: it depends on the corpus and the text's length, so dividing
sim(query, haystack) by sim(query, bare needle) (the ``normalized`` column) means nothing for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from embedeval.embedders.base import check_texts
from embedeval.errors import ConfigError, InputError
from embedeval.strategies.full_text import FULL_TEXT
from embedeval.strategies.scoring import Reading, Scores

#: BM25 term-frequency saturation and length normalisation: ``bm25s``'s defaults.
DEFAULT_K1 = 1.5
DEFAULT_B = 0.75
#: The ``bm25s`` scoring variant (idf and term-frequency formulas of the module docstring).
METHOD = "lucene"
#: ``bm25s``'s English stop-word list (Lucene's 33 words), and the PyStemmer language.
STOPWORDS = "en"
STEMMER_LANGUAGE = "english"


def partition_members(partition: Sequence | None, n_texts: int) -> list[np.ndarray]:
    """The indices of the texts of each corpus, in the order the partition values first appear.

    ``partition``: ``None`` (one corpus of all the texts) or one hashable value per text; values
    are compared as dictionary keys. :class:`InputError` for a string, a wrong length or an
    unhashable value."""
    if partition is None:
        return [np.arange(n_texts)]
    if isinstance(partition, (str, bytes)):
        raise InputError("partition must be a sequence of values, one per text, not a single string")
    try:
        values = list(partition)
    except TypeError:
        raise InputError(f"partition must be a sequence of values, one per text, not {type(partition).__name__}") from None
    if len(values) != n_texts:
        raise InputError(f"partition has {len(values)} values for {n_texts} texts; give one value per text "
                         f"(or None for one corpus)")
    members: dict = {}
    for i, value in enumerate(values):
        try:
            members.setdefault(value, []).append(i)
        except TypeError:
            raise InputError(f"partition value #{i} ({type(value).__name__}) is not hashable") from None
    return [np.asarray(indices, dtype=np.int64) for indices in members.values()]


class BM25Texts:
    """Texts read by :class:`BM25Scorer`: one ``bm25s.BM25`` index per partition.

    ``seen_chars[t] = len(texts[t])`` (BM25 reads everything); ``corpora``: per partition, the
    indices of its texts and its index (``None`` when its texts hold no token at all, say only
    stop words: every query then scores 0 against them)."""

    def __init__(self, scorer: BM25Scorer, texts: list[str], partition: Sequence | None):
        members = partition_members(partition, len(texts))
        self.scorer = scorer
        self.seen_chars = np.asarray([len(text) for text in texts], dtype=np.int64)
        import bm25s  # here, as in tokenize: bm25s takes a while to import

        tokens = scorer.tokenize(texts)
        self.corpora: list[tuple[np.ndarray, bm25s.BM25 | None]] = []
        for indices in members:
            corpus = [tokens[i] for i in indices]
            retriever = None
            if any(corpus):  # bm25s cannot index a corpus without a single token
                retriever = bm25s.BM25(k1=scorer.k1, b=scorer.b, method=METHOD)
                retriever.index(corpus, show_progress=False)
            self.corpora.append((indices, retriever))

    def scores(self, queries: Sequence[str]) -> Scores:
        """:class:`Scores` of shape ``(len(queries), n_texts)``: ``values[q, t]`` is the BM25 score of
        query ``q`` for text ``t`` in ``t``'s partition (``bm25s``'s ``get_scores``, float32 widened
        to float64); piece 0, spanning the whole text."""
        queries = check_texts(queries, "query")
        values = np.zeros((len(queries), len(self.seen_chars)), dtype=np.float64)
        query_tokens = self.scorer.tokenize(queries) if queries else []
        for indices, retriever in self.corpora:
            if retriever is None:
                continue
            for q, tokens in enumerate(query_tokens):
                # bm25s fails on an empty token list (a query of stop words only); it scores 0.
                # Tokens absent from this corpus are dropped by get_scores and add nothing.
                if tokens:
                    values[q, indices] = retriever.get_scores(tokens)
        return Scores.whole(values, self.seen_chars)


class BM25Scorer:
    """BM25 (``bm25s``, Lucene variant) over whole texts, with stop-word removal and English
    stemming; see the module docstring for the formula and for partitions.

    ``k1`` (>= 0): term-frequency saturation; ``b`` (in [0, 1]): how much a longer text is
    penalised (0: not at all, 1: in proportion to ``|d| / avgdl``).
    """

    name = "bm25"
    strategy = FULL_TEXT
    windows_exact = True
    normalizable = False
    reading: Reading | None = None  # what the last index() read and took

    def __init__(self, k1: float = DEFAULT_K1, b: float = DEFAULT_B):
        if not k1 >= 0:
            raise ConfigError(f"BM25 k1 must be >= 0, not {k1}")
        if not 0 <= b <= 1:
            raise ConfigError(f"BM25 b must be between 0 and 1, not {b}")
        self.k1 = float(k1)
        self.b = float(b)
        import Stemmer

        self.stemmer = Stemmer.Stemmer(STEMMER_LANGUAGE)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's stemmed tokens, stop words dropped (``bm25s.tokenize``); the same function
        for texts and queries, so their vocabularies match."""
        import bm25s

        return bm25s.tokenize(list(texts), stopwords=STOPWORDS, stemmer=self.stemmer,
                              return_ids=False, show_progress=False)

    def index(self, texts: Sequence[str], partition: Sequence | None = None) -> BM25Texts:
        """Read ``texts`` (non-empty strings), one BM25 corpus per distinct ``partition`` value
        (``None``: one corpus); :class:`InputError` for an empty text or a partition of the
        wrong length. The seconds it took are kept in :attr:`reading` (it reads every token; no
        cache)."""
        start = time.perf_counter()
        indexed = BM25Texts(self, check_texts(texts, "document"), partition)
        self.reading = Reading(None, time.perf_counter() - start)
        return indexed
