"""The :class:`Embedder` protocol every model backend implements, the wrappers' base, and what the cache reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from embedeval.embedders.requests import KINDS, Kind, Request, RequestEmbedder, check_texts
from embedeval.errors import InvalidVectorsError

__all__ = ["KINDS", "Kind", "check_texts"]  # where the pipeline has always found them (defined with the requests)
#: Each kind as a progress bar names what it embeds.
KIND_WORDS = {"query": "queries", "document": "documents"}


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model: the whole contract between models and the pipeline.

    - ``name``: the spec string (``st:all-MiniLM-L6-v2``, ``openai:text-embedding-3-small``, ...).
    - ``dim``: length of the vectors; ``max_tokens``: tokens the model reads per text (special
      tokens included); a longer text is truncated by the model.
    - ``fingerprint``: a string that changes whenever something other than the text and kind
      would change a vector (weights, ``max_seq_length``, prompts, pooling; for API models the
      model id, dimensions and task). The cache keys on it.
    - ``embed_request(request)``: a float32 array of shape ``(len(request), dim)`` whose rows are
      L2-normalised (a dot product is a cosine similarity), in input order
      (:mod:`embedeval.embedders.requests`); the request's ``kind`` is ``"query"`` or
      ``"document"``; models with query/document prompts or input types use them.
      ``serves(RequestType)``: whether it (and every embedder it wraps) serves such requests.
      ``embed(texts, kind)``: the vectors of a request of texts.
    - ``count_tokens(texts)``: tokens per text as the model would consume them, special tokens
      included, before truncation.
    - ``check()``: raise an :class:`~embedeval.errors.EmbedevalError` if the model cannot be
      reached (API key refused, unknown model); a no-op for local models.
    """

    name: str

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def embed_request(self, request: Request) -> np.ndarray: ...

    def serves(self, request_type: type) -> bool: ...

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...

    def check(self) -> None: ...


@dataclass
class EmbedStats:
    """What a cached embedder did: ``requested`` texts asked for, ``cache_hits`` of them found in
    the cache, ``embedded`` distinct texts sent to the model in ``model_calls`` calls (a text
    repeated within one call is embedded once and counts as neither hit nor embedded again);
    ``tokenized``: distinct texts whose token-id prefix was not cached and was computed;
    ``document_seconds``: wall seconds the model took for the documents it embedded (its calls,
    weights loaded before them; queries left out), ``document_tokens``: the tokens of those inputs
    (a request's ``tokens``: a text's as the model counts them, at most its window; token ids by
    their length): a speed measured on cache misses only."""

    requested: int = 0
    cache_hits: int = 0
    embedded: int = 0
    model_calls: int = 0
    tokenized: int = 0
    document_seconds: float = 0.0
    document_tokens: int = 0


#: The Python types of JSON numbers as a parser gives them (``bool`` is not one: ``true`` is no number).
JSON_NUMBER_TYPES = frozenset({int, float})


def first_non_number(row) -> object | None:
    """The first component of a parsed vector that is not a number (a JSON ``true``, a string such as
    ``"0.5"``, a null, a list), wrapped in a 1-tuple; None when all are numbers. numpy would read
    ``true`` as 1.0 and ``"0.5"`` as 0.5."""
    if isinstance(row, np.ndarray):
        return None if row.dtype.kind in "fiu" else (row.flat[0] if row.size else None,)
    if set(map(type, row)) <= JSON_NUMBER_TYPES:
        return None
    for value in row:
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
            return (value,)
    return None


def _shown(value: object) -> str:
    """A component as JSON writes it (``true``, ``"0.5"``, ``null``), cut short."""
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_vectors(vectors, n_texts: int, dim: int, source: str) -> np.ndarray:
    """``vectors`` as a float32 ``(n_texts, dim)`` array, or :class:`InvalidVectorsError` naming
    ``source`` and the problem: wrong count or length, a component that is not a number (parsed
    rows: ``true``, ``"0.5"``), null, NaN/inf, a value beyond float32 (``1e39``), or a zero vector
    (which has no direction). Checked in float64, so ``[1e20, ...]`` is a vector, not an overflow."""
    if not isinstance(vectors, np.ndarray):  # rows from a parsed response: say which row is wrong
        rows = list(vectors)
        for i, row in enumerate(rows):
            if row is None:
                raise InvalidVectorsError(f"{source} returned a null vector (#{i})")
            if not hasattr(row, "__len__") or isinstance(row, (str, bytes, dict)):
                raise InvalidVectorsError(f"{source} returned {type(row).__name__} instead of a vector (#{i})")
            if len(row) != dim:
                raise InvalidVectorsError(f"{source} returned a vector of {len(row)} values (#{i}), expected {dim}")
            if (bad := first_non_number(row)) is not None:
                raise InvalidVectorsError(f"{source} returned a vector value that is not a number (#{i} holds {_shown(bad[0])})")
        vectors = rows
    try:
        wide = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidVectorsError(f"{source} returned vectors that are not numbers ({exc})") from None
    if wide.shape != (n_texts, dim):
        raise InvalidVectorsError(f"{source} returned vectors of shape {wide.shape}, expected ({n_texts}, {dim})")
    if not np.isfinite(wide).all():
        raise InvalidVectorsError(f"{source} returned NaN or infinite values")
    beyond = np.abs(wide) > np.finfo(np.float32).max
    if beyond.any():
        row, col = np.argwhere(beyond)[0]
        raise InvalidVectorsError(f"{source} returned {wide[row, col]:g} (#{row}), which is beyond float32 "
                                  f"(at most {np.finfo(np.float32).max:.3g})")
    if not wide.any(axis=1).all():
        raise InvalidVectorsError(f"{source} returned an all-zero vector (#{int(np.argmin(wide.any(axis=1)))})")
    array = wide.astype(np.float32)
    if not array.any(axis=1).all():
        raise InvalidVectorsError(f"{source} returned a vector whose values are all too small for float32 "
                                  f"(#{int(np.argmin(array.any(axis=1)))}: below {np.finfo(np.float32).smallest_subnormal:.3g})")
    return array


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors / ||vectors||_2`` row-wise as float32 (zero rows stay zero). The norm is
    taken in float64: squared in float32, ``1e20`` overflows (and ``1e-30`` underflows), and such a
    row would come out all zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    wide = vectors.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1, keepdims=True)
    return (wide / np.where(norms == 0, 1.0, norms)).astype(np.float32)


@runtime_checkable
class TokenIdEmbedder(Embedder, Protocol):
    """An :class:`Embedder` that can be fed token ids, so that a long text's windows are cut
    exactly where the model's own tokenizer puts them and never re-tokenised (``st:`` models).

    - ``id_capacity(kind)``: content tokens one input holds (``max_tokens`` minus the special
      tokens and the kind's prompt).
    - ``token_fingerprint``: a string that changes whenever the tokenizer would give a text other
      ids or offsets (the cache keys token prefixes on it).
    - ``token_ids(texts, limit)``: per text, its content token ids (no special tokens) and each
      token's ``(start, end)`` character offsets; with ``limit``, at least the first ``limit``
      tokens (or all, if the text has fewer), which is cheaper on long texts.

    It serves :class:`~embedeval.embedders.requests.TokenIds`: sequences of at most
    ``id_capacity(kind)`` content ids, to which the model adds its special tokens and prompt; for
    a text's first ``id_capacity`` ids the vector equals ``embed([text])``.
    """

    def id_capacity(self, kind: Kind = "document") -> int: ...

    @property
    def token_fingerprint(self) -> str: ...

    def token_ids(self, texts: Sequence[str], limit: int | None = None) -> list[tuple[list[int], list[tuple[int, int]]]]: ...


class EmbedderWrapper(RequestEmbedder):
    """An embedder around another (``inner``) that passes on what it does not change: ``name``,
    ``dim``, ``max_tokens``, ``fingerprint``, ``count_tokens``, ``check`` and which requests it
    ``serves`` (the cache, the plan's recorder and the Ray pool are such wrappers); each has its
    own ``embed_request``."""

    def __init__(self, inner: Embedder):
        self.inner = inner
        self.name = inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def serves(self, request_type: type) -> bool:
        return self.inner.serves(request_type)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def check(self) -> None:
        self.inner.check()


class TokenIdWrapper(EmbedderWrapper):
    """An :class:`EmbedderWrapper` of a :class:`TokenIdEmbedder` that also passes on
    ``id_capacity``, ``token_fingerprint`` and ``token_ids``."""

    def id_capacity(self, kind: Kind = "document") -> int:
        return self.inner.id_capacity(kind)

    @property
    def token_fingerprint(self) -> str:
        return self.inner.token_fingerprint

    def token_ids(self, texts: Sequence[str], limit: int | None = None):
        return self.inner.token_ids(texts, limit)
