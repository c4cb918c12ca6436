"""How a long text is scored against a query (docs/strategies.md): ``truncate``, ``windows-mean``,
``chunks-max@C`` or ``late-chunking@C``, for any embedder; the :class:`Scorer` protocol the
similarity and rank tables read, with its implementation for embedders (:class:`EmbeddingScorer`;
the lexical baseline's is :class:`~embedeval.embedders.bm25.BM25Scorer`); and the spec -> scorers
step of the sweep.

A strategy cuts each text into the pieces a model reads, embeds every distinct piece once, and
scores a text from its pieces' vectors:

- ``truncate``: one piece, the text's first ``W`` content tokens (``W`` = the model's capacity:
  ``max_tokens`` minus special tokens and prompt) — what the model does natively. Score =
  cos(q, v).
- ``windows-mean``: consecutive windows of ``W`` tokens (``overlap`` tokens shared by neighbours)
  over the whole text; v = normalise(mean of the window vectors). Score = cos(q, v).
- ``extend-gp@L``, ``extend-rp@L``, ``extend-pi@L``, ``extend-pi-dynamic@L`` (absolute positions), ``rope-ntk@L``,
  ``rope-linear@L`` (rotary positions), each optionally ``+logscale``: one piece, the text's first
  ``L`` tokens (counted as ``max_tokens`` counts them, special tokens and prompt included) read in
  one pass by a model with fewer positions, which are re-used or stretched for it
  (:mod:`embedeval.embedders.stretch`, after LongEmbed). Score = cos(q, v). ``windows-mean`` is
  LongEmbed's PCW (parallel context windows).
- ``chunks-max@C``: consecutive chunks the model reads as inputs of ``C`` tokens (counted as
  ``max_tokens`` counts them, special tokens and prompt included, so ``C`` <= ``max_tokens`` and
  ``chunks-max@256`` fills all-MiniLM-L6-v2's 256-token window: chunks of ``C - (max_tokens -
  W)`` content tokens); score = max over chunks of cos(q, chunk) — what a RAG retriever does.
  The scores keep which chunk won.

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
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import numpy as np

from embedeval.defaults import (
    DEFAULT_CHUNK_TOKENS, DEFAULT_COMMIT_EVERY, DEFAULT_LATE_CHUNKING_OVERLAP, DEFAULT_STRATEGIES, DEFAULT_WINDOW_OVERLAP,
    TEXT_FIT_MARGIN,
)
from embedeval.embedders.base import Embedder, Reading, Scores, TokenIdEmbedder, check_texts, l2_normalize
from embedeval.embedders.requests import LateChunks, StretchedIds, TokenIds, innermost, late_chunking_refusal
from embedeval.embedders.bm25 import BM25Scorer
from embedeval.embedders.executors import Executor
from embedeval.embedders.local import folder_stretch_refusal, local_name, position_limit
from embedeval.embedders.models import resolve_model_path
from embedeval.embedders.options import LocalOptions, split_spec
from embedeval.embedders.registry import LEXICAL_SPECS, load_embedder
from embedeval.embedders.stretch import METHODS, READS_L, STRATEGY_PREFIX, Stretch
from embedeval.errors import ConfigError, InputError
from embedeval.labels import CHUNKED_PREFIX, LATE_CHUNKED_PREFIX, TRUNCATE
from embedeval.embedders.tokens import TokenCounter

WINDOWS_MEAN, CHUNKS_MAX, LATE_CHUNKING = "windows-mean", "chunks-max", "late-chunking"
#: Texts tokenised at a time when cutting pieces (token offsets of 8k-token texts add up).
TOKENIZE_BATCH = 256
#: Context extension (:mod:`embedeval.embedders.stretch`): strategy name -> method.
STRETCH_METHODS: dict[str, str] = {STRATEGY_PREFIX[kind] + method: method for kind, methods in METHODS.items() for method in methods}
LOGSCALE_SUFFIX = "+logscale"
STRATEGY_NAMES: tuple[str, ...] = (TRUNCATE, WINDOWS_MEAN, CHUNKS_MAX, LATE_CHUNKING, *STRETCH_METHODS)
#: Strategies that take a chunk size (``--chunk-tokens``), one strategy per size.
CHUNKED: tuple[str, ...] = (CHUNKS_MAX, LATE_CHUNKING)
#: Strategies whose windows overlap, and the overlap each gets when none is given.
OVERLAP_DEFAULTS: dict[str, int] = {WINDOWS_MEAN: DEFAULT_WINDOW_OVERLAP, LATE_CHUNKING: DEFAULT_LATE_CHUNKING_OVERLAP}


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


@dataclass(frozen=True)
class Strategy:
    """One way of reading long texts. ``label`` is the table's ``strategy`` value
    (``truncate``, ``windows-mean``, ``chunks-max@128``, ``late-chunking@128``,
    ``extend-gp@4096``, ``extend-pi@4096+logscale``)."""

    name: str
    chunk_tokens: int | None = None  # chunks-max and late-chunking only
    #: windows-mean and late-chunking: tokens shared by neighbouring windows (None: the strategy's
    #: default, :data:`OVERLAP_DEFAULTS`; 0 for the others).
    overlap: int | None = None
    #: Context extension only: the tokens read in one pass (``L``), and whether attention logits
    #: are scaled past the model's positions.
    read_tokens: int | None = None
    logscale: bool = False

    def __post_init__(self) -> None:
        if self.name not in STRATEGY_NAMES:
            raise ConfigError(f"unknown strategy {self.name!r}; use one of {', '.join(STRATEGY_NAMES)}")
        if (self.name in STRETCH_METHODS) != (self.read_tokens is not None) or (self.logscale and self.name not in STRETCH_METHODS):
            raise ConfigError(f"a length to read (@L) and {LOGSCALE_SUFFIX} go with {', '.join(STRETCH_METHODS)}, and only "
                              f"with them (e.g. {next(iter(STRETCH_METHODS))}@4096)")
        if self.read_tokens is not None and self.read_tokens < 1:
            raise ConfigError(f"{self.name} reads a positive number of tokens, not {self.read_tokens}")
        if (self.name in CHUNKED) != (self.chunk_tokens is not None):
            raise ConfigError("a chunk size goes with chunks-max and late-chunking, and only with them")
        if self.chunk_tokens is not None and self.chunk_tokens < 1:
            raise ConfigError(f"chunk size must be a positive token count, not {self.chunk_tokens}")
        if self.overlap is None:
            object.__setattr__(self, "overlap", OVERLAP_DEFAULTS.get(self.name, 0))
        if self.overlap < 0 or (self.overlap and self.name not in OVERLAP_DEFAULTS):
            raise ConfigError(f"a window overlap (>= 0 tokens) goes with {' and '.join(OVERLAP_DEFAULTS)} only, "
                              f"not {self.overlap} for {self.name}")

    @property
    def stretch(self) -> Stretch | None:
        """How a context-extension strategy reads past the model's positions (None for the others)."""
        if self.name not in STRETCH_METHODS:
            return None
        method = STRETCH_METHODS[self.name]
        return Stretch(method, self.logscale, self.read_tokens if method in READS_L else None)

    @property
    def one_piece(self) -> bool:
        """Whether a text is read as one piece, its start (``truncate`` and context extension)."""
        return self.name == TRUNCATE or self.name in STRETCH_METHODS

    @classmethod
    def stretched(cls, text: str) -> Strategy:
        """A context-extension strategy from its name, ``extend-gp@4096`` or
        ``rope-ntk@8192+logscale``; anything else is one :class:`ConfigError`."""
        head, _, tail = text.partition("@")
        length, _, scaled = tail.partition("+")
        if head not in STRETCH_METHODS or not (length.isascii() and length.isdigit()) or scaled not in ("", LOGSCALE_SUFFIX[1:]):
            example = head if head in STRETCH_METHODS else next(iter(STRETCH_METHODS))
            raise ConfigError(f"strategy {text!r}: write {example}@L or {example}@L{LOGSCALE_SUFFIX}, L the tokens read in "
                              "one pass (e.g. 4096)", "strategies")
        return cls(head, read_tokens=int(length), logscale=bool(scaled))

    @property
    def label(self) -> str:
        if self.read_tokens is not None:
            return f"{self.name}@{self.read_tokens}" + (LOGSCALE_SUFFIX if self.logscale else "")
        if self.name == CHUNKS_MAX:
            return f"{CHUNKED_PREFIX}{self.chunk_tokens}"
        return f"{LATE_CHUNKED_PREFIX}{self.chunk_tokens}" if self.name == LATE_CHUNKING else self.name


def parse_strategies(names: Sequence[str] = DEFAULT_STRATEGIES, chunk_tokens: Sequence[int] = DEFAULT_CHUNK_TOKENS,
                     window_overlap: int = DEFAULT_WINDOW_OVERLAP,
                     late_overlap: int = DEFAULT_LATE_CHUNKING_OVERLAP) -> list[Strategy]:
    """The strategies a run asks for: ``chunks-max`` and ``late-chunking`` become one strategy per
    chunk size; ``window_overlap`` goes to ``windows-mean``, ``late_overlap`` to ``late-chunking``;
    context extension is named with its length (``extend-gp@4096``, :meth:`Strategy.stretched`).
    Unknown names, repeats (two spellings of one strategy too), chunk sizes < 1 and a negative
    overlap are a :class:`ConfigError`."""
    names = list(names)
    if not names:
        raise ConfigError("no strategies given")
    unknown = [n for n in names if n not in STRATEGY_NAMES and n.partition("@")[0] not in (*STRETCH_METHODS, *CHUNKED)]
    if unknown:
        raise ConfigError(f"unknown strategy {unknown[0]!r}; use one of {', '.join(STRATEGY_NAMES)} "
                          f"(context extension as {next(iter(STRETCH_METHODS))}@L, one chunk size as chunks-max@C)")
    for option, overlap in (("window", window_overlap), ("late-chunking", late_overlap)):
        if overlap < 0:
            raise ConfigError(f"{option} overlap must be >= 0 tokens, not {overlap}")
    sizes = list(chunk_tokens)
    if any(name in CHUNKED for name in names):
        if not sizes:
            raise ConfigError("chunks-max and late-chunking need at least one chunk size (`chunk_tokens`)", "chunk_tokens")
        if any(int(c) < 1 for c in sizes) or len(set(sizes)) != len(sizes):
            raise ConfigError(f"chunk sizes must be distinct positive token counts, not {sizes}")
    overlaps = {WINDOWS_MEAN: window_overlap, LATE_CHUNKING: late_overlap}
    out = []
    for name in names:
        head, at, size = name.partition("@")
        if name in CHUNKED:
            out += [Strategy(name, chunk_tokens=int(c), overlap=overlaps.get(name, 0)) for c in sizes]
        elif at and head in CHUNKED:  # one chunk size, as labels spell it: chunks-max@128
            if not (size.isascii() and size.isdigit() and int(size) > 0):
                raise ConfigError(f"strategy {name!r}: write {head}@C, C the chunk size in tokens (e.g. {head}@128)", "strategies")
            out.append(Strategy(head, chunk_tokens=int(size), overlap=overlaps.get(head, 0)))
        elif name not in STRATEGY_NAMES or name in STRETCH_METHODS:
            out.append(Strategy.stretched(name))
        else:
            out.append(Strategy(name, overlap=overlaps.get(name, 0)))
    # repeats compared by label, so that two spellings of one strategy (extend-gp@1024, extend-gp@01024) are one
    labels = [strategy.label for strategy in out]
    if len(set(labels)) != len(labels):
        twice = next(label for label in labels if labels.count(label) > 1)
        raise ConfigError(f"strategy {twice} given twice in {', '.join(names)}")
    return out


#: Providers whose models late-chunk: local models (token embeddings), Jina (the API's own late chunking).
LATE_CHUNKING_PROVIDERS = ("st", "jina")


def check_strategy_support(specs: Sequence[str], strategies: Sequence[Strategy], executor: str = "local") -> None:
    """Refuse, before any model is loaded, a strategy an embedder cannot do: late chunking needs a
    local ``st:`` model on the local executor (token embeddings) or a ``jina:`` model; context
    extension a local ``st:`` model on the local executor (its positions)."""
    stretched = next((s.label for s in strategies if s.stretch is not None), None)
    for spec in specs if stretched else ():
        if spec not in LEXICAL_SPECS and (spec.partition(":")[0] != "st" or executor != "local"):
            raise ConfigError(f"{stretched} is not offered for {spec} on the {executor} executor: context extension changes "
                              "a local st: model's positions, on the local executor")
    for spec in specs if stretched else ():
        if spec not in LEXICAL_SPECS:
            for strategy in strategies:
                if strategy.stretch is not None:
                    check_stretch_in_folder(spec, strategy)
    if not any(s.name == LATE_CHUNKING for s in strategies):
        return
    for spec in specs:
        provider = spec.partition(":")[0]
        if spec in LEXICAL_SPECS:
            continue
        if provider not in LATE_CHUNKING_PROVIDERS:
            raise ConfigError(f"late-chunking is not offered for {spec}: it needs a local st: model (token embeddings) "
                              "or a jina: model (the API's own late chunking)")
        if provider == "st" and executor != "local":
            raise ConfigError(f"late-chunking of {spec} runs on the local executor only (the Ray actors return pooled "
                              "vectors, not token embeddings); use `executor` local", "executor")


def _misfit(strategy: Strategy, name: str, why: str) -> ConfigError:
    return ConfigError(f"{strategy.label} does not fit {name}: {why}")


def _reads_no_further(strategy: Strategy, name: str, limit: int) -> ConfigError:
    return ConfigError(f"{strategy.label} reads no further than {name} does itself: it has {limit} positions; "
                       f"use @L with L above {limit}", "strategies")


def check_stretch_in_folder(spec: str, strategy: Strategy) -> None:
    """Refuse a context extension the model folder of the ``st:`` ``spec`` already rules out, before
    the model loads (the weights take seconds to a minute): a length ``L`` not above the folder's
    positions ``P`` (:func:`~embedeval.embedders.local.position_limit`), a folder that names no
    ``P``, a backend other than torch, a method for another position type where the folder says
    which it has (:func:`~embedeval.embedders.local.folder_stretch_refusal`). The same refusals,
    in the same words, as :class:`EmbeddingScorer` makes with the model at hand; what only the
    loaded model can tell (``+logscale``, a non-BERT table) is left to it."""
    name, query = split_spec(spec.partition(":")[2])
    options = LocalOptions.parse(query)
    path = resolve_model_path(name)
    limit = position_limit(path)
    why = folder_stretch_refusal(path, options, strategy.stretch, limit)
    if why:
        raise _misfit(strategy, local_name(name, options), why)
    if strategy.read_tokens <= limit[0]:
        raise _reads_no_further(strategy, local_name(name, options), limit[0])


def piece_bounds(n_tokens: int, size: int, step: int) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` of consecutive pieces of ``size`` tokens, each starting
    ``step`` after the previous, covering ``n_tokens`` (at least one piece, even when empty)."""
    if n_tokens <= size:
        return [(0, n_tokens)]
    overlap = size - step
    return [(start, min(start + size, n_tokens)) for start in range(0, n_tokens - overlap, step)]


def segment_starts(owner: np.ndarray) -> np.ndarray:
    """Where each text's pieces begin in a sorted ``owner`` array (for ``np.ufunc.reduceat``)."""
    return np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if owner.size else np.zeros(0, dtype=np.int64)


@dataclass
class Pieces:
    """What a model reads of a list of texts: ``inputs[i]`` (token ids as int32 bytes, or text) of
    text ``owner[i]`` spanning characters ``spans[i]``; ``owner`` is sorted. ``seen_chars[t]``:
    characters of text ``t`` read from its start; ``tokens_read[t]``: the tokens the model reads of
    it (its inputs' tokens; for late chunking its windows', overlaps counted again)."""

    inputs: list
    owner: np.ndarray
    spans: np.ndarray
    seen_chars: np.ndarray
    tokens_read: np.ndarray


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


class TokenMemo:
    """The token ids and character offsets (int32 arrays) of the last texts one model read, shared
    by its strategies: tokenising thousands of 8k-token haystacks costs about a minute, once.

    ``encode(texts, tokenize, limit)`` returns per text ``(ids, offsets)``, at least the first
    ``limit`` tokens (all with ``limit=None``); a stored encoding of the same texts by the same
    tokenizer that reaches as far serves again (so windows and chunks after a full tokenisation,
    and truncation after either, cost nothing more). ``tokenize`` is the model's ``token_ids``
    (or the reference ``ids``).
    """

    def __init__(self):
        self._key: tuple | None = None
        self._limit: int | None = None
        self._encoded: list[tuple[np.ndarray, np.ndarray]] = []

    def encode(self, texts: list[str], tokenize, limit: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
        digest = hashlib.blake2b(digest_size=16)
        for text in texts:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        key = (id(getattr(tokenize, "__self__", tokenize)), len(texts), digest.digest())  # which tokenizer, which texts
        if key == self._key and (self._limit is None or (limit is not None and limit <= self._limit)):
            return self._encoded
        encoded = []
        for first in range(0, len(texts), TOKENIZE_BATCH):  # the tokenizer's Python offsets are large: a batch at a time
            for ids, offsets in tokenize(texts[first : first + TOKENIZE_BATCH], limit):
                encoded.append((np.asarray(ids, dtype=np.int32), np.asarray(offsets, dtype=np.int32).reshape(-1, 2)))
        self._key, self._limit, self._encoded = key, limit, encoded
        return encoded


class EmbeddingScorer:
    """An :class:`~embedeval.embedders.base.Embedder` read through a :class:`Strategy`: a
    :class:`~embedeval.strategies.Scorer`.

    ``reference`` cuts texts for models that cannot be fed token ids (API models).
    ``dedupe=False`` sends every text to ``embed`` whole, as before token-id keying (``truncate``
    only; a check that the two give the same tables). Scorers of one model share a
    :class:`TokenMemo`, so the texts are tokenised once for all strategies.
    """

    normalizable = True
    reading: Reading | None = None  # what the last index() read and the model's time on it

    def __init__(self, embedder: Embedder, strategy: Strategy, reference: TokenCounter | None = None, dedupe: bool = True,
                 memo: TokenMemo | None = None):
        self.embedder = embedder
        self.memo = memo
        self.strategy_spec = strategy
        self.name = embedder.name
        self.strategy = strategy.label
        self.reads_ids = _takes_document_ids(embedder)
        self.windows_exact = self.reads_ids
        self.dedupe = dedupe
        if not self.reads_ids and reference is None and strategy.name != TRUNCATE:
            raise ConfigError(f"{strategy.label} for {embedder.name} needs a reference tokenizer to cut windows")
        self.reference = reference
        self.capacity = self._capacity()
        # Tokens of a model input that are not the text's (special tokens, prompt): chunk sizes count them.
        self.frame_tokens = embedder.max_tokens - self.capacity if self.reads_ids else 0
        if strategy.stretch is not None:
            self._check_stretch()
            self.capacity = strategy.read_tokens - self.frame_tokens
        largest = embedder.max_tokens if self.reads_ids else self.capacity
        if strategy.name == CHUNKS_MAX and not self.frame_tokens < strategy.chunk_tokens <= largest:
            raise ConfigError(f"chunks of {strategy.chunk_tokens} tokens do not fit {embedder.name}, which reads "
                              f"{largest} tokens per input ({self.frame_tokens} of them special); "
                              f"use `chunk_tokens` between {self.frame_tokens + 1} and {largest}", "chunk_tokens")
        if strategy.name == LATE_CHUNKING:
            self._check_late_chunking()
        if strategy.overlap >= self.capacity:
            raise ConfigError(f"a window overlap of {strategy.overlap} tokens leaves nothing new in {embedder.name}'s "
                              f"windows of {self.capacity} tokens")

    def _check_stretch(self) -> None:
        """Refuse context extension where it is not defined: a model not fed token ids by this
        process, one whose positions the method does not fit (:func:`embedeval.embedders.stretch.refusal`),
        or a length ``L`` the model reads without stretching (not above its positions ``P``)."""
        embedder, strategy = self.embedder, self.strategy_spec
        if not (self.reads_ids and embedder.serves(StretchedIds)):
            raise ConfigError(f"{strategy.label} is not offered for {embedder.name}: context extension changes a local st: "
                              "model's positions, on the local executor")
        model = innermost(embedder)
        why = model.stretch_refusal(strategy.stretch)
        if why:
            raise _misfit(strategy, embedder.name, why)
        limit = model.positions()
        if strategy.read_tokens <= limit or strategy.read_tokens <= self.frame_tokens:
            raise _reads_no_further(strategy, embedder.name, limit)

    def _check_late_chunking(self) -> None:
        """Refuse late chunking where it is not defined: a model without token embeddings, one whose
        own vector is not the normalised mean of them (pooling other than mean, or a module other than
        Normalize after it), or chunks longer than the model's window."""
        embedder, chunk = self.embedder, self.strategy_spec.chunk_tokens
        if not embedder.serves(LateChunks):
            raise ConfigError(f"late-chunking is not offered for {embedder.name}: it needs a local st: model run by the local "
                              "executor (token embeddings) or a jina: model (the API's own late chunking)")
        why = late_chunking_refusal(embedder)
        if why:
            raise ConfigError(f"late-chunking is not defined for {embedder.name}: {why}")
        if chunk > self.capacity:
            raise ConfigError(f"late-chunking@{chunk} does not fit {embedder.name}, which reads {self.capacity} content "
                              f"tokens per window; use `chunk_tokens` up to {self.capacity}", "chunk_tokens")

    @property
    def window_tokens(self) -> int | None:
        """The content tokens the model reads of a text when the strategy reads one window of it
        (``truncate``: the model's window less its special tokens and prompt, 254 for
        all-MiniLM-L6-v2; ``extend-*@L``: L less them); None for a strategy that reads the whole
        text in several pieces."""
        return self.capacity if self.strategy_spec.one_piece else None

    @property
    def model_window(self) -> int:
        """The content tokens the model reads of a text in its own one window, whatever the strategy
        (254 for all-MiniLM-L6-v2): the lengths a haystack is read whole at, the embedder's base
        (:func:`~embedeval.breaks.break_points`)."""
        return self.embedder.id_capacity("document") if self.reads_ids else self.embedder.max_tokens - TEXT_FIT_MARGIN

    def _capacity(self) -> int:
        """Content tokens the model reads per input. A model fed text (an API model) is cut
        :data:`~embedeval.defaults.TEXT_FIT_MARGIN` reference tokens below its window, as the
        embedder cuts it itself; its windows keep a second margin below that, so that a window
        re-tokenised on its own never exceeds the cut."""
        if self.reads_ids:
            return self.embedder.id_capacity("document")
        return self.embedder.max_tokens - TEXT_FIT_MARGIN - (0 if self.strategy_spec.name == TRUNCATE else TEXT_FIT_MARGIN)

    def index(self, texts: Sequence[str], partition: Sequence | None = None) -> EmbeddedTexts:
        """Cut, embed (each distinct piece once) and combine; ``partition`` is not used. What it
        read and the model's time on what it embedded are kept in :attr:`reading`."""
        texts = check_texts(texts, "document")
        if not texts:
            empty = np.zeros(0, dtype=np.int64)
            self.reading = Reading(empty, None)
            return EmbeddedTexts(self.embedder, np.zeros((0, self.embedder.dim), dtype=np.float32), empty,
                                 empty.reshape(0, 2), empty)
        pieces = self._cut(texts)
        stats = getattr(self.embedder, "stats", None)  # the cache's: the model's time on its misses
        before = None if stats is None else (stats.document_seconds, stats.document_tokens)
        if self.strategy_spec.name == LATE_CHUNKING:
            vectors = self._embed_late(pieces.inputs)
        elif self.strategy_spec.stretch is not None:
            vectors = self._embed_distinct(pieces.inputs, lambda ids: self.embedder.embed_request(StretchedIds.of(
                ids, self.strategy_spec.stretch, "document")))
        else:
            vectors = self._embed_pieces(pieces.inputs, texts if not self.dedupe else None)
        self.reading = Reading(pieces.tokens_read, *((None, None) if before is None else
                                                     (stats.document_seconds - before[0], stats.document_tokens - before[1])))
        owner, spans = pieces.owner, pieces.spans
        if self.strategy_spec.name == WINDOWS_MEAN:
            vectors = l2_normalize(np.add.reduceat(vectors.astype(np.float64), segment_starts(owner), axis=0))
            owner = np.arange(len(texts))
            spans = np.stack([np.zeros(len(texts), dtype=np.int64), pieces.seen_chars], axis=1)
        return EmbeddedTexts(self.embedder, vectors, owner, spans, pieces.seen_chars)

    def _cut(self, texts: list[str]) -> Pieces:
        strategy, capacity = self.strategy_spec, self.capacity
        if strategy.name == TRUNCATE and not self.reads_ids:  # the embedder's own cut, made here: dedupes too
            read = self.reference.prefixes(texts, capacity) if self.reference else list(texts)
            seen = np.array([len(t) for t in read], dtype=np.int64)
            tokens = (self.reference.count(read) if self.reference else
                      [min(n, self.embedder.max_tokens) for n in self.embedder.count_tokens(read)])
            return Pieces(read, np.arange(len(texts)), np.stack([np.zeros(len(texts), dtype=np.int64), seen], axis=1), seen,
                          np.asarray(tokens, dtype=np.int64))
        if strategy.name == LATE_CHUNKING:
            return self._cut_late(texts)
        if strategy.one_piece:
            size, step, limit = capacity, capacity, capacity
        elif strategy.name == WINDOWS_MEAN:
            size, step, limit = capacity, capacity - strategy.overlap, None
        else:
            size = step = strategy.chunk_tokens - self.frame_tokens
            limit = None
        tokenize = self.embedder.token_ids if self.reads_ids else self.reference.ids
        encoded = (self.memo or TokenMemo()).encode(texts, tokenize, limit)
        inputs, owner, spans, seen = [], [], [], np.zeros(len(texts), dtype=np.int64)
        read = np.zeros(len(texts), dtype=np.int64)
        for t, (text, (ids, offsets)) in enumerate(zip(texts, encoded)):
            if not len(ids):
                raise InputError(f"text #{t} has no tokens for {self.name} ({text[:40]!r}); it cannot be embedded")
            bounds = piece_bounds(len(ids), size, step)[: 1 if strategy.one_piece else None]
            read[t] = sum(end - start for start, end in bounds)
            for start, end in bounds:
                span = (int(offsets[start, 0]), int(offsets[end - 1, 1]))
                inputs.append(ids[start:end].tobytes() if self.reads_ids else text[span[0] : span[1]])
                owner.append(t)
                spans.append(span)
            seen[t] = len(text) if bounds[-1][1] >= len(ids) else spans[-1][1]
        return Pieces(inputs, np.asarray(owner, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2), seen, read)

    def _cut_late(self, texts: list[str]) -> Pieces:
        """Late chunking's pieces: consecutive chunks of ``chunk_tokens`` content tokens (the last one
        shorter), each a tuple of parts ``(window, (start, end))``: a window the model reads whole and
        the chunk's unit range in it. For a model fed ids (:meth:`_late_parts_ids`) windows are token
        ids (int32 bytes) that overlap and a chunk may span two of them; for an API
        (:meth:`_late_parts_text`) windows are chunk texts and a chunk is one of them."""
        tokenize = self.embedder.token_ids if self.reads_ids else self.reference.ids
        encoded = (self.memo or TokenMemo()).encode(texts, tokenize, None)
        parts_of = self._late_parts_ids if self.reads_ids else self._late_parts_text
        inputs, owner, spans = [], [], []
        read = np.zeros(len(texts), dtype=np.int64)
        for t, (text, (ids, offsets)) in enumerate(zip(texts, encoded)):
            if not len(ids):
                raise InputError(f"text #{t} has no tokens for {self.name} ({text[:40]!r}); it cannot be embedded")
            # the windows the model reads: overlapping for a model fed ids, side by side for an API
            step = self.capacity - (self.strategy_spec.overlap if self.reads_ids else 0)
            read[t] = sum(end - start for start, end in piece_bounds(len(ids), self.capacity, step))
            for parts, (a, b) in parts_of(text, ids, offsets):
                inputs.append(parts)
                owner.append(t)
                spans.append((int(offsets[a, 0]), int(offsets[b - 1, 1])))
        seen = np.array([len(t) for t in texts], dtype=np.int64)
        return Pieces(inputs, np.asarray(owner, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2), seen, read)

    def _late_parts_ids(self, text: str, ids: np.ndarray, offsets: np.ndarray):
        """Per chunk (its parts, its token range): the windows of :func:`late_layout`, as id bytes."""
        windows: dict[int, bytes] = {}
        for chunk in late_layout(len(ids), self.capacity, self.strategy_spec.overlap, self.strategy_spec.chunk_tokens):
            for first, _, _ in chunk:
                windows.setdefault(first, ids[first : first + self.capacity].tobytes())
            yield tuple((windows[first], (a - first, b - first)) for first, a, b in chunk), (chunk[0][1], chunk[-1][2])

    def _late_parts_text(self, text: str, ids: np.ndarray, offsets: np.ndarray):
        """Per chunk (its one part, its token range): windows of the model's capacity that do not
        overlap, each sent as its chunk texts (the API pools every input of a request itself), so a
        chunk never spans two windows."""
        size = self.strategy_spec.chunk_tokens
        for first, last in piece_bounds(len(ids), self.capacity, self.capacity):
            chunks = [(first + a, first + b) for a, b in piece_bounds(last - first, size, size)]
            window = tuple(text[int(offsets[a, 0]) : int(offsets[b - 1, 1])] for a, b in chunks)
            for k, chunk in enumerate(chunks):
                yield ((window, (k, k + 1)),), chunk

    def _embed_late(self, inputs: list) -> np.ndarray:
        """Vectors of late-chunking pieces: each distinct window runs once (through the cache),
        each distinct chunk is pooled once."""
        windows: dict = {}
        chunks: dict = {}
        for piece in inputs:
            if piece not in chunks:
                chunks[piece] = tuple((windows.setdefault(w, len(windows)), a, b) for w, (a, b) in piece)
        if not chunks:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        units = [np.frombuffer(w, dtype=np.int32) if self.reads_ids else list(w) for w in windows]
        vectors = self.embedder.embed_request(LateChunks.of(units, list(chunks.values()), "document"))
        row = {piece: i for i, piece in enumerate(chunks)}
        return vectors[[row[piece] for piece in inputs]]

    def _embed_pieces(self, inputs: list, whole_texts: list[str] | None) -> np.ndarray:
        """Vectors of ``inputs``, each distinct input embedded once (``whole_texts``: embed these
        texts instead, one by one as given: the check without deduplication)."""
        if whole_texts is not None and self.strategy_spec.name == TRUNCATE:
            return self.embedder.embed(whole_texts, kind="document")
        if self.reads_ids:
            return self._embed_distinct(inputs, lambda ids: self.embedder.embed_request(TokenIds.of(ids, "document")))
        return self._embed_distinct(inputs, lambda texts: self.embedder.embed(texts, kind="document"), as_ids=False)

    def _embed_distinct(self, inputs: list, embed, as_ids: bool = True) -> np.ndarray:
        """``embed`` each distinct input once, longest first (similar lengths batch with little
        padding), id bytes given as int32 arrays (``as_ids``); the vectors in ``inputs``' order."""
        distinct = sorted(dict.fromkeys(inputs), key=len, reverse=True)
        vectors = embed([np.frombuffer(ids, dtype=np.int32) for ids in distinct] if as_ids else distinct)
        where = {item: i for i, item in enumerate(distinct)}
        return vectors[[where[item] for item in inputs]]


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


def stretch_shortfalls(scorers: Sequence, longest: int) -> list[str]:
    """One line per context-extension scorer whose ``@L`` cannot read a ``longest``-token haystack
    whole, naming the ``L`` that would: ``L`` counts the model's special tokens and prompt, haystack
    lengths count content tokens, so ``extend-gp@2048`` on all-MiniLM-L6-v2 reads 2,046 of a
    2,048-token haystack's tokens and ``extend-gp@2050`` reads them all."""
    lines = []
    for scorer in scorers:
        spec = getattr(scorer, "strategy_spec", None)
        if spec is None or spec.stretch is None or scorer.window_tokens >= longest:
            continue
        whole = replace(spec, read_tokens=longest + scorer.frame_tokens).label
        lines.append(f"{scorer.name} [{scorer.strategy}] reads {scorer.window_tokens:,} content tokens of a text ({scorer.frame_tokens} "
                     f"of its {spec.read_tokens:,} are special tokens or prompt): the {longest:,}-token haystacks lose their last "
                     f"{longest - scorer.window_tokens:,}, and a needle there is not read; {whole} reads them whole")
    return lines


def late_layout(n_tokens: int, window: int, overlap: int, chunk: int) -> list[list[tuple[int, int, int]]]:
    """How late chunking reads a text of ``n_tokens`` content tokens, as jina-ai/late-chunking reads
    long documents: macro windows of ``window`` tokens, each starting ``overlap`` tokens before the
    previous one ends; a later window's first ``overlap`` outputs are dropped, so every token keeps
    exactly one output (from the first window holding it, or the window its left context is in).
    The text is cut into chunks of ``chunk`` tokens, each returned as its parts ``(first, start,
    end)``: the window starting at token ``first`` gives the outputs of tokens ``[start, end)``
    (text positions). A chunk spans two windows (more when ``chunk > window - overlap``) where it
    crosses a boundary; its vector is the mean over all its parts' outputs."""
    windows = piece_bounds(n_tokens, window, window - overlap)
    kept_from = np.array([first + (overlap if k else 0) for k, (first, _) in enumerate(windows)])
    layout = []
    for start, end in piece_bounds(n_tokens, chunk, chunk):
        first_window, last_window = np.searchsorted(kept_from, [start, end - 1], side="right") - 1
        layout.append([(windows[k][0], max(start, int(kept_from[k])), min(end, windows[k][1]) if k == last_window
                        else int(kept_from[k + 1])) for k in range(first_window, last_window + 1)])
    return layout
