"""An embedder read through a strategy: :class:`EmbeddingScorer`, the
:class:`~embedeval.strategies.scoring.Scorer` of an embedder (the lexical baseline's is
:class:`~embedeval.strategies.bm25.BM25Scorer`) and the
:class:`~embedeval.strategies.reader.Reader` its strategy's family reads with; what it read
(:class:`EmbeddedTexts`), and the spec -> scorers step of the sweep (:func:`load_scorers`).

A strategy cuts each text into the pieces a model reads, embeds every distinct piece once, and
scores a text from its pieces' vectors (by default its best piece: max over chunks); what each
family cuts, embeds and combines is its module's (:mod:`embedeval.strategies`), with the primitives
the :class:`EmbeddingScorer` hands it.

For models fed token ids (``st:``; :class:`~embedeval.embedders.base.TokenIdEmbedder`) the
pieces are the model's own token ids, never decoded and re-tokenised, and a piece is embedded
once per distinct id sequence across everything indexed together (and cached on the ids): two
haystacks whose first ``W`` tokens agree cost one vector. For models fed text (API models, and
``st:`` models whose document prompt does not tokenise apart from the text) the pieces are text
cut with the reference tokenizer — an estimate of what the model reads, so ``windows_exact`` is
False: ``truncate`` sends the word-aligned prefix the embedder would cut itself (two texts with the
same prefix cost one request), windows keep a further margin below that cut.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

from embedeval.defaults import DEFAULT_COMMIT_EVERY, TEXT_FIT_MARGIN
from embedeval.embedders.base import Embedder, TokenIdEmbedder, check_texts, l2_normalize
from embedeval.embedders.executors import Executor
from embedeval.embedders.registry import LEXICAL_SPECS, load_embedder
from embedeval.embedders.requests import LateChunks, StretchedIds, TokenIds, innermost, late_chunking_refusal
from embedeval.embedders.stretch_methods import Stretch
from embedeval.embedders.tokens import TokenCounter
from embedeval.errors import ConfigError, InputError
from embedeval.strategies.base import Strategy, piece_bounds
from embedeval.strategies.bm25 import BM25Scorer
from embedeval.strategies.reader import Pieces, PositionedModel
from embedeval.strategies.scoring import Reading, Scores
from embedeval.strategies.token_memo import TokenMemo


def segment_starts(owner: np.ndarray) -> np.ndarray:
    """Where each text's pieces begin in a sorted ``owner`` array (for ``np.ufunc.reduceat``)."""
    return np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if owner.size else np.zeros(0, dtype=np.int64)


def _takes_document_ids(embedder: Embedder) -> bool:
    """Whether documents can go to ``embedder`` as token ids that reproduce its own ``encode``
    (a :class:`~embedeval.embedders.base.TokenIdEmbedder` whose document prompt, if any,
    tokenises apart from the text)."""
    if not isinstance(embedder, TokenIdEmbedder):
        return False
    try:
        embedder.id_capacity("document")
    except InputError:
        return False
    return True


class EmbeddingScorer:
    """An :class:`~embedeval.embedders.base.Embedder` read through a
    :class:`~embedeval.strategies.base.Strategy`: a :class:`~embedeval.strategies.scoring.Scorer`.
    The strategy's family (:attr:`~embedeval.strategies.base.Strategy.family`) checks it against the
    model, cuts, embeds and combines; this class is the :class:`~embedeval.strategies.reader.Reader`
    it is handed: what the model reads per input and the primitives it does that with.

    ``reference`` cuts texts for models that cannot be fed token ids (API models).
    ``dedupe=False`` sends every text to ``embed`` whole, as before token-id keying (``truncate``
    only; a check that the two give the same tables). Scorers of one model share a
    :class:`~embedeval.strategies.token_memo.TokenMemo`, so the texts are tokenised once for all strategies.
    """

    normalizable = True
    reading: Reading | None = None  # what the last index() read and the model's time on it

    def __init__(self, embedder: Embedder, strategy: Strategy, reference: TokenCounter | None = None, dedupe: bool = True,
                 memo: TokenMemo | None = None):
        self.embedder = embedder
        self.memo = memo
        self.strategy_spec = strategy
        self.family = strategy.family
        self.name = embedder.name
        self.strategy = strategy.label
        self.reads_ids = _takes_document_ids(embedder)
        self.windows_exact = self.reads_ids
        self.dedupe = dedupe
        if not self.reads_ids and reference is None and self.family.text_margins > 1:  # windows cut apart
            raise ConfigError(f"{strategy.label} for {embedder.name} needs a reference tokenizer to cut windows")
        self.reference = reference
        self._capacity = self._model_capacity()
        # Tokens of a model input that are not the text's (special tokens, prompt): chunk sizes count them.
        self.frame_tokens = embedder.max_tokens - self.capacity if self.reads_ids else 0
        self.family.prepare(strategy, self)
        if strategy.overlap >= self.capacity:
            raise ConfigError(f"a window overlap of {strategy.overlap} tokens leaves nothing new in {embedder.name}'s "
                              f"windows of {self.capacity} tokens")

    # -- what the families ask of the model ------------------------------------------------------

    def offers_late_chunking(self) -> bool:
        return self.embedder.serves(LateChunks)

    def late_chunking_refusal(self) -> str | None:
        return late_chunking_refusal(self.embedder)

    def offers_stretching(self) -> bool:
        return self.embedder.serves(StretchedIds)

    def model(self) -> PositionedModel:
        """The model under the cache and other wrappers (its positions and refusals)."""
        return innermost(self.embedder)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens per text as the model consumes them, special tokens included, before truncation."""
        return self.embedder.count_tokens(texts)

    @property
    def max_tokens(self) -> int:
        """The model's window: the tokens it reads per input, special tokens and prompt included."""
        return self.embedder.max_tokens

    @property
    def capacity(self) -> int:
        """Content tokens the model reads per input: the model's (:meth:`_model_capacity`) unless the
        family set its own (:meth:`set_capacity`)."""
        return self._capacity

    def set_capacity(self, tokens: int) -> None:
        """Read ``tokens`` content tokens per input instead of the model's window (context extension's
        ``L`` less the model's special tokens and prompt)."""
        self._capacity = tokens

    @property
    def window_tokens(self) -> int | None:
        """The content tokens the model reads of a text when the strategy reads one window of it
        (``truncate``: the model's window less its special tokens and prompt, 254 for
        all-MiniLM-L6-v2; ``extend-*@L``: L less them); None for a strategy that reads the whole
        text in several pieces."""
        return self.capacity if self.family.one_piece else None

    @property
    def model_window(self) -> int:
        """The content tokens the model reads of a text in its own one window, whatever the strategy
        (254 for all-MiniLM-L6-v2): the lengths a haystack is read whole at, the embedder's base
        (:func:`~embedeval.breaks.break_points`)."""
        return self.embedder.id_capacity("document") if self.reads_ids else self.embedder.max_tokens - TEXT_FIT_MARGIN

    def _model_capacity(self) -> int:
        """Content tokens the model reads per input. A model fed text (an API model) is cut
        :data:`~embedeval.defaults.TEXT_FIT_MARGIN` reference tokens below its window, as the
        embedder cuts it itself; a family whose windows are cut apart and re-read keeps a second
        margin below that (:attr:`~embedeval.strategies.base.Family.text_margins`), so that a window
        re-tokenised on its own never exceeds the cut."""
        if self.reads_ids:
            return self.embedder.id_capacity("document")
        return self.embedder.max_tokens - TEXT_FIT_MARGIN * self.family.text_margins

    # -- reading ---------------------------------------------------------------------------------

    def index(self, texts: Sequence[str], partition: Sequence | None = None) -> EmbeddedTexts:
        """Cut, embed (each distinct piece once) and combine; ``partition`` is not used. What it
        read and the model's time on what it embedded are kept in :attr:`reading`."""
        texts = check_texts(texts, "document")
        if not texts:
            empty = np.zeros(0, dtype=np.int64)
            self.reading = Reading(empty, None)
            return EmbeddedTexts(self.embedder, self.no_vectors(), empty, empty.reshape(0, 2), empty)
        strategy, family = self.strategy_spec, self.family
        pieces = family.cut(strategy, self, texts)
        stats = getattr(self.embedder, "stats", None)  # the cache's: the model's time on its misses
        before = None if stats is None else (stats.document_seconds, stats.document_tokens)
        vectors = family.embed(strategy, self, pieces.inputs, texts)
        self.reading = Reading(pieces.tokens_read, *((None, None) if before is None else
                                                     (stats.document_seconds - before[0], stats.document_tokens - before[1])))
        vectors, owner, spans = family.combine(strategy, self, vectors, pieces, len(texts))
        return EmbeddedTexts(self.embedder, vectors, owner, spans, pieces.seen_chars)

    def cut(self, texts: Sequence[str]) -> Pieces:
        """The pieces the model reads of ``texts`` (the family's cut; what :meth:`index` embeds)."""
        return self.family.cut(self.strategy_spec, self, list(texts))

    def embed_inputs(self, inputs: list) -> np.ndarray:
        """The vectors of pieces' ``inputs`` (:meth:`cut`), each distinct one embedded once, as
        :meth:`index` embeds them."""
        return self.family.embed(self.strategy_spec, self, inputs, [])

    def encode(self, texts: list[str], limit: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text its token ids and character offsets, at least the first ``limit`` tokens: the
        model's own for a model fed ids, else the reference tokenizer's (shared :class:`TokenMemo`)."""
        tokenize = self.embedder.token_ids if self.reads_ids else self.reference.ids
        return (self.memo or TokenMemo()).encode(texts, tokenize, limit)

    def check_tokens(self, t: int, text: str, ids) -> None:
        """An :class:`InputError` for text #``t`` that has no tokens: it cannot be embedded."""
        if not len(ids):
            raise InputError(f"text #{t} has no tokens for {self.name} ({text[:40]!r}); it cannot be embedded")

    @staticmethod
    def pieces(inputs: list, owner: Sequence[int], spans: Sequence[tuple[int, int]], seen: Sequence[int],
               read: Sequence[int]) -> Pieces:
        """:class:`Pieces` from lists."""
        return Pieces(inputs, np.asarray(owner, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2),
                      np.asarray(seen, dtype=np.int64), np.asarray(read, dtype=np.int64))

    def cut_consecutive(self, texts: list[str], size: int, step: int, limit: int | None, first_only: bool = False) -> Pieces:
        """Consecutive pieces of ``size`` tokens, each ``step`` after the previous
        (:func:`~embedeval.strategies.base.piece_bounds`), as token id bytes for a model fed ids,
        else as text; ``first_only``: the first piece (tokenised only as far as ``limit``)."""
        inputs, owner, spans, seen = [], [], [], np.zeros(len(texts), dtype=np.int64)
        read = np.zeros(len(texts), dtype=np.int64)
        for t, (text, (ids, offsets)) in enumerate(zip(texts, self.encode(texts, limit), strict=True)):
            self.check_tokens(t, text, ids)
            bounds = piece_bounds(len(ids), size, step)[: 1 if first_only else None]
            read[t] = sum(end - start for start, end in bounds)
            for start, end in bounds:
                span = (int(offsets[start, 0]), int(offsets[end - 1, 1]))
                inputs.append(ids[start:end].tobytes() if self.reads_ids else text[span[0] : span[1]])
                owner.append(t)
                spans.append(span)
            seen[t] = len(text) if bounds[-1][1] >= len(ids) else spans[-1][1]
        return self.pieces(inputs, owner, spans, seen, read)

    def no_vectors(self) -> np.ndarray:
        return np.zeros((0, self.embedder.dim), dtype=np.float32)

    def embed_whole(self, texts: list[str]) -> np.ndarray:
        """Every text sent to ``embed`` whole, as given (the check without deduplication)."""
        return self.embedder.embed(texts, kind="document")

    def embed_pieces(self, inputs: list) -> np.ndarray:
        """Vectors of ``inputs``, each distinct input embedded once."""
        if self.reads_ids:
            return self._embed_distinct(inputs, lambda ids: self.embedder.embed_request(TokenIds.of(ids, "document")))
        return self._embed_distinct(inputs, lambda texts: self.embedder.embed(texts, kind="document"), as_ids=False)

    def embed_stretched(self, inputs: list, stretch: Stretch) -> np.ndarray:
        """Vectors of id-byte ``inputs`` read past the model's positions, each distinct input once."""
        return self._embed_distinct(inputs, lambda ids: self.embedder.embed_request(StretchedIds.of(ids, stretch, "document")))

    def embed_late_chunks(self, windows: list, chunks: list) -> np.ndarray:
        """Vectors of late chunks: ``windows`` (id bytes, or tuples of chunk texts) each read once,
        ``chunks`` their parts ``(window index, start, end)``."""
        units = [np.frombuffer(w, dtype=np.int32) if self.reads_ids else list(w) for w in windows]
        return self.embedder.embed_request(LateChunks.of(units, chunks, "document"))

    def _embed_distinct(self, inputs: list, embed, as_ids: bool = True) -> np.ndarray:
        """``embed`` each distinct input once, longest first (similar lengths batch with little
        padding), id bytes given as int32 arrays (``as_ids``); the vectors in ``inputs``' order."""
        distinct = sorted(dict.fromkeys(inputs), key=len, reverse=True)
        vectors = embed([np.frombuffer(ids, dtype=np.int32) for ids in distinct] if as_ids else distinct)
        where = {item: i for i, item in enumerate(distinct)}
        return vectors[[where[item] for item in inputs]]

    @staticmethod
    def mean_per_text(vectors: np.ndarray, pieces: Pieces, n_texts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One vector per text, the normalised mean of its pieces' vectors, spanning what was read."""
        means = l2_normalize(np.add.reduceat(vectors.astype(np.float64), segment_starts(pieces.owner), axis=0))
        spans = np.stack([np.zeros(n_texts, dtype=np.int64), pieces.seen_chars], axis=1)
        return means, np.arange(n_texts), spans


def distinct_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``vectors`` (equal bytes, in first-seen order) and, per row, the index
    of its distinct row: ``distinct[inverse] == vectors``."""
    vectors = np.ascontiguousarray(vectors)
    if not len(vectors):
        return vectors, np.zeros(0, dtype=np.int64)
    keys = vectors.reshape(len(vectors), -1).view(np.dtype((np.void, vectors[0].nbytes))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return vectors[first[order]], rank[inverse.ravel()]


class EmbeddedTexts:
    """Texts read by an :class:`EmbeddingScorer`: piece vectors, their owners and spans."""

    def __init__(self, embedder: Embedder, vectors: np.ndarray, owner: np.ndarray, spans: np.ndarray, seen_chars: np.ndarray):
        self.embedder, self.vectors, self.owner, self.spans, self.seen_chars = embedder, vectors, owner, spans, seen_chars
        self.starts = segment_starts(owner)

    @functools.cached_property
    def _distinct(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`distinct_rows` of the piece vectors, found once for every call of :meth:`scores`."""
        return distinct_rows(self.vectors)

    def scores(self, queries: Sequence[str]) -> Scores:
        """cos(query, piece) for every piece; a text's score is its best piece's (max over chunks).
        Each distinct piece vector is scored once (:func:`distinct_rows`), so pieces the model read
        alike (a needle haystack whose window is its control's) get the same score to the last bit,
        wherever a matrix product's blocking puts them, and tie."""
        query_vectors = self.embedder.embed(list(queries), kind="query")
        distinct, inverse = self._distinct
        piece_scores = (query_vectors @ distinct.T).astype(np.float64)[:, inverse]
        if len(self.starts) == len(self.owner):  # one piece per text
            return Scores(piece_scores, np.zeros(piece_scores.shape, dtype=np.int64),
                          np.broadcast_to(self.spans[:, 0], piece_scores.shape).copy(),
                          np.broadcast_to(self.spans[:, 1], piece_scores.shape).copy())
        values = np.maximum.reduceat(piece_scores, self.starts, axis=1)
        local = np.arange(len(self.owner)) - self.starts[self.owner]
        marked = np.where(piece_scores == values[:, self.owner], local, np.iinfo(np.int64).max)
        best = np.minimum.reduceat(marked, self.starts, axis=1)  # the first chunk reaching the max
        chosen = self.starts + best
        return Scores(values, best, self.spans[chosen, 0], self.spans[chosen, 1])


def load_scorers(spec: str, strategies: Sequence[Strategy], reference: TokenCounter | None = None, *,
                 cache_dir: str | os.PathLike | None = None, progress: bool = False,
                 commit_every: int = DEFAULT_COMMIT_EVERY, dedupe: bool = True, executor: Executor | None = None,
                 plan: bool = False) -> list:
    """The scorers of one spec: a lexical scorer once (it reads whole texts), an embedder once
    per strategy (loaded, checked and cached once; its misses embedded by ``executor``). ``plan``:
    the embedder records what it would embed instead (:func:`~embedeval.embedders.registry.load_embedder`)."""
    if spec in LEXICAL_SPECS:
        return [BM25Scorer()]
    embedder = load_embedder(spec, cache_dir=cache_dir, progress=progress, commit_every=commit_every,
                             executor=None if plan else executor, plan=plan)
    memo = TokenMemo()  # the haystacks are tokenised once for all the strategies
    return [EmbeddingScorer(embedder, strategy, reference, dedupe=dedupe, memo=memo) for strategy in strategies]


def shortfalls(scorers: Sequence, longest: int) -> list[str]:
    """One line per scorer whose strategy cannot read a ``longest``-token haystack whole where that
    is news (:meth:`~embedeval.strategies.base.Family.shortfall`: a context extension's ``@L``
    below it), naming what would."""
    return [line for scorer in scorers if isinstance(scorer, EmbeddingScorer)
            for line in [scorer.family.shortfall(scorer.strategy_spec, scorer, longest)] if line]
