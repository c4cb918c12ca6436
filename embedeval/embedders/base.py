"""The :class:`Embedder` protocol every model backend implements, and what the cache reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from embedeval.errors import InputError, InvalidVectorsError

Kind = Literal["query", "document"]
KINDS: tuple[str, ...] = ("query", "document")


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model: the whole contract between models and the pipeline.

    - ``name``: the spec string (``st:all-MiniLM-L6-v2``, ``openai:text-embedding-3-small``, ...).
    - ``dim``: length of the vectors; ``max_tokens``: tokens the model reads per text (special
      tokens included); a longer text is truncated by the model.
    - ``fingerprint``: a string that changes whenever something other than the text and kind
      would change a vector (weights, ``max_seq_length``, prompts, pooling; for API models the
      model id, dimensions and task). The cache keys on it.
    - ``embed(texts, kind)``: a float32 array of shape ``(len(texts), dim)`` whose rows are
      L2-normalised (a dot product is a cosine similarity), in input order. ``kind`` is
      ``"query"`` or ``"document"``; models with query/document prompts or input types use them.
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

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...

    def check(self) -> None: ...


@dataclass
class EmbedStats:
    """What a cached embedder did: ``requested`` texts asked for, ``cache_hits`` of them found in
    the cache, ``embedded`` distinct texts sent to the model in ``model_calls`` calls (a text
    repeated within one call is embedded once and counts as neither hit nor embedded again)."""

    requested: int = 0
    cache_hits: int = 0
    embedded: int = 0
    model_calls: int = 0


def check_texts(texts: Sequence[str], kind: str) -> list[str]:
    """Validate an embed() call: a known ``kind`` and non-empty strings. Returns a list."""
    if kind not in KINDS:
        raise InputError(f"unknown embedding kind {kind!r}; use one of {', '.join(KINDS)}")
    if isinstance(texts, str):
        raise InputError("embed() takes a list of texts, not a single string")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text #{i} is {type(text).__name__}, not a string")
        if not text.strip():
            raise InputError(f"text #{i} is empty")
    return texts


def check_vectors(vectors, n_texts: int, dim: int, source: str) -> np.ndarray:
    """``vectors`` as a float32 ``(n_texts, dim)`` array, or :class:`InvalidVectorsError` naming
    ``source`` and the problem: wrong count or length, null, NaN/inf, or a zero vector (which has
    no direction)."""
    if not isinstance(vectors, np.ndarray):  # rows from a parsed response: say which row is wrong
        rows = list(vectors)
        for i, row in enumerate(rows):
            if row is None:
                raise InvalidVectorsError(f"{source} returned a null vector (#{i})")
            if not hasattr(row, "__len__"):
                raise InvalidVectorsError(f"{source} returned {type(row).__name__} instead of a vector (#{i})")
            if len(row) != dim:
                raise InvalidVectorsError(f"{source} returned a vector of {len(row)} values (#{i}), expected {dim}")
        vectors = rows
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidVectorsError(f"{source} returned vectors that are not numbers ({exc})") from None
    if array.shape != (n_texts, dim):
        raise InvalidVectorsError(f"{source} returned vectors of shape {array.shape}, expected ({n_texts}, {dim})")
    if not np.isfinite(array).all():
        raise InvalidVectorsError(f"{source} returned NaN or infinite values")
    if (np.linalg.norm(array, axis=1) == 0).any():
        raise InvalidVectorsError(f"{source} returned an all-zero vector")
    return array


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors / ||vectors||_2`` row-wise as float32 (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32, copy=False)
