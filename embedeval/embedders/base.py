"""The :class:`Embedder` protocol every model backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from embedeval.errors import InputError

Kind = Literal["query", "document"]
KINDS: tuple[str, ...] = ("query", "document")


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model.

    ``embed`` returns a float32 array of shape ``(len(texts), dim)`` whose rows are L2-normalised
    (so a dot product is a cosine similarity), in input order. ``count_tokens`` counts the tokens
    the model would consume for each text, special tokens included, before truncation; a text
    with more than ``max_tokens`` tokens is truncated by the model.
    """

    name: str

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


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


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors / ||vectors||_2`` row-wise as float32 (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32, copy=False)
