"""Embedding backends, the persistent cache, and the spec registry."""

from embedeval.embedders.base import Embedder, l2_normalize
from embedeval.embedders.cache import CachedEmbedder, EmbeddingCache, clear_cache
from embedeval.embedders.registry import DEFAULT_EMBEDDER, expand_specs, known_specs, load_embedder

__all__ = [
    "DEFAULT_EMBEDDER",
    "CachedEmbedder",
    "Embedder",
    "EmbeddingCache",
    "clear_cache",
    "expand_specs",
    "known_specs",
    "l2_normalize",
    "load_embedder",
]
