"""Exact top-k vector search over unit vectors: faiss (default) or chromadb.

Both take our own L2-normalised vectors (chromadb gets no embedding function, so nothing is
downloaded) and return cosine similarities, best first.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import numpy as np

from embedeval.errors import ConfigError

INDEXES = ("faiss", "chroma")


def search_faiss(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, row indices), each (n_queries, k), by exact inner product (``IndexFlatIP``)."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    scores, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(vectors)))
    return scores.astype(float), ids


def search_chroma(
    vectors: np.ndarray, queries: np.ndarray, k: int, path: str | Path | None = None, documents: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The same through a chromadb ``PersistentClient`` collection (cosine space, high ``ef`` so
    HNSW is effectively exact at these sizes). Similarity = 1 - chroma's cosine distance."""
    import chromadb
    from chromadb.config import Settings

    with tempfile.TemporaryDirectory() as scratch:
        client = chromadb.PersistentClient(path=str(path or scratch), settings=Settings(anonymized_telemetry=False))
        name = "embedeval-" + hashlib.sha256(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).hexdigest()[:16]
        existing = {c.name if hasattr(c, "name") else c for c in client.list_collections()}
        if name in existing:
            client.delete_collection(name)
        ef = max(256, 2 * k)
        collection = client.create_collection(
            name, embedding_function=None,
            metadata={"hnsw:space": "cosine", "hnsw:search_ef": ef, "hnsw:construction_ef": ef, "hnsw:M": 32},
        )
        step = client.get_max_batch_size()
        for start in range(0, len(vectors), step):
            rows = range(start, min(start + step, len(vectors)))
            collection.add(ids=[str(i) for i in rows], embeddings=vectors[start : rows.stop].astype(np.float32),
                           documents=[documents[i] for i in rows] if documents else None)
        result = collection.query(query_embeddings=queries.astype(np.float32), n_results=min(k, len(vectors)),
                                  include=["distances"])
        ids = np.array([[int(i) for i in row] for row in result["ids"]])
        scores = 1.0 - np.array(result["distances"], dtype=float)
        del client
    return scores, ids


def top_k(vectors: np.ndarray, queries: np.ndarray, k: int, index: str = "faiss", path: str | Path | None = None,
          documents: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows of ``vectors`` for each query: (cosine similarities, row indices), best first."""
    if k < 1:
        raise ConfigError(f"top-k must be >= 1, not {k}")
    if index == "faiss":
        return search_faiss(vectors, queries, k)
    if index == "chroma":
        return search_chroma(vectors, queries, k, path, documents)
    raise ConfigError(f"unknown index {index!r}; use one of {', '.join(INDEXES)}")
