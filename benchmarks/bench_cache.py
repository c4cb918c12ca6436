"""Embedding-cache overhead, measured side by side in one run.

Embeds 2,000 distinct texts three ways with the offline all-MiniLM-L6-v2:
  direct  model.encode on the texts (the floor),
  cold    through an empty embedeval cache,
  warm    again through the now-filled cache.
Prints seconds and the ratios cold/direct (target <= 1.10) and warm/cold (target <= 0.02).
"""

from __future__ import annotations

import random
import tempfile
import time

from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.cached import CachedEmbedder
from embedeval.embedders.local import SentenceTransformerEmbedder

WORDS = (
    "river harbour lantern violin orchard glacier market ledger pilot canyon meadow bakery "
    "compass theatre engine saddle quarry beacon archive tunnel garden falcon ribbon cellar"
).split()


def make_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{i}: " + " ".join(rng.choices(WORDS, k=rng.randint(8, 30))) + "." for i in range(n)]


def main(n: int = 2000) -> None:
    texts = make_texts(n)
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    embedder.embed(texts[:64])  # warm up torch kernels for both paths

    start = time.perf_counter()
    embedder.model.encode(texts, batch_size=embedder.batch_size, normalize_embeddings=True)
    direct = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as folder:
        cached = CachedEmbedder(embedder, EmbeddingCache(folder))
        start = time.perf_counter()
        cached.embed(texts)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        cached.embed(texts)
        warm = time.perf_counter() - start

    print(f"texts            {n}")
    print(f"direct encode    {direct:8.3f} s")
    print(f"cold (cache)     {cold:8.3f} s   cold/direct = {cold / direct:.3f}  (target <= 1.10)")
    print(f"warm (cache)     {warm:8.3f} s   warm/cold   = {warm / cold:.4f} (target <= 0.02)")


if __name__ == "__main__":
    main()
