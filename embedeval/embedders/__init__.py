"""Embedding backends, the persistent cache, and the spec registry.

The names below are imported when first asked for (``from embedeval.embedders import
load_embedder``), not when a submodule is: importing ``embedeval.embedders.budget`` (as the
command line does) must not pull in every backend."""

_WHERE = {
    "Embedder": "base", "l2_normalize": "base",
    "CachedEmbedder": "cached", "EmbeddingCache": "cache", "clear_cache": "cache",
    "DEFAULT_EMBEDDER": "registry", "expand_specs": "registry", "known_specs": "registry", "load_embedder": "registry",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'embedeval.embedders' has no attribute {name!r}")
    if _WHERE[name] == "base":
        from embedeval.embedders import base as module
    elif _WHERE[name] == "cache":
        from embedeval.embedders import cache as module
    elif _WHERE[name] == "cached":
        from embedeval.embedders import cached as module
    else:
        from embedeval.embedders import registry as module
    return getattr(module, name)
