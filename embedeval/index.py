"""Exact top-k vector search over unit vectors: faiss (default) or chromadb.

Both take our own L2-normalised vectors (chromadb gets no embedding function, so nothing is
downloaded) and return cosine similarities, best first.

chromadb runs embedded (a ``PersistentClient`` folder, or a temporary one) or as a shared server
(``HttpClient`` at ``http://HOST:PORT``, e.g. ``chroma run --host 0.0.0.0 --port 8000 --path DIR``),
so a team can keep one index of chunk vectors. A collection holds one embedder's vectors of one
set of chunks: it is named after them (:func:`collection_identity`: embedder, its fingerprint and
a digest of the chunks; readable prefix, hashed rest, a valid chroma name) with the full identity
(corpus, chunker, seed, ...) in its metadata, and is reused when present and complete instead of
rebuilt; the chunk vectors are then not even computed.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from embedeval.errors import ConfigError

INDEXES = ("faiss", "chroma")
#: Vectors, or a function computing them (called only when a collection must be filled).
Vectors = np.ndarray | Callable[[], np.ndarray]
#: Metadata key prefix of a collection's identity.
_META = "embedeval:"
#: The identity keys that decide what a collection holds (a reused collection must match them);
#: the rest of an identity, the chunks' origin (corpus, chunker, seed), is recorded only.
CONTENT_KEYS = ("embedder", "fingerprint", "dim", "n_chunks", "chunks_sha256", "vectors_sha256")


def _materialise(vectors: Vectors) -> np.ndarray:
    return np.ascontiguousarray(vectors() if callable(vectors) else vectors, dtype=np.float32)


def search_faiss(vectors: Vectors, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, row indices), each (n_queries, k), by exact inner product (``IndexFlatIP``)."""
    import faiss

    vectors = _materialise(vectors)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    scores, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(vectors)))
    return scores.astype(float), ids


def collection_identity(embedder: str, fingerprint: str, dim: int, chunk_ids: Sequence[str], texts: Sequence[str],
                        origin: Mapping[str, object] | None = None) -> dict[str, str | int]:
    """What a collection of chunk vectors holds: the embedder (spec, fingerprint, dim), the chunks
    (count and a sha256 of their ids and texts) and where they came from (``origin``: corpus,
    chunker, seed; recorded, not hashed, so the same chunks share one collection however their
    corpus was named)."""
    digest = hashlib.sha256()
    for chunk_id, text in zip(chunk_ids, texts, strict=True):
        digest.update(f"{len(chunk_id)}:{chunk_id}{len(text)}:".encode())
        digest.update(text.encode())
    identity: dict[str, str | int] = {"embedder": embedder, "fingerprint": fingerprint, "dim": int(dim),
                                      "n_chunks": len(texts), "chunks_sha256": digest.hexdigest()}
    for key, value in (origin or {}).items():
        identity[str(key)] = value if isinstance(value, (int, str)) else json.dumps(value)
    return identity


def _content(identity: Mapping[str, object]) -> dict[str, object]:
    """``identity`` without the chunks' recorded origin: its :data:`CONTENT_KEYS`."""
    return {key: value for key, value in identity.items() if key in CONTENT_KEYS}


def collection_name(identity: Mapping[str, object]) -> str:
    """A valid chroma name (3-512 characters of ``[A-Za-z0-9._-]``, alphanumeric at both ends; we
    keep it under 64): ``ee-`` + the embedder and chunker made safe + a hash of what the
    collection holds (:func:`_content`: embedder, fingerprint, dim, chunk count and digest)."""
    digest = hashlib.sha256(json.dumps(_content(identity), sort_keys=True).encode()).hexdigest()[:16]
    label = f"{identity.get('embedder', '')}-{identity.get('chunker', '')}"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")[:40].strip("-")
    return f"ee-{slug}-{digest}" if slug else f"ee-{digest}"


def chroma_client(url: str | None = None, path: str | Path | None = None):
    """A chromadb client: ``HttpClient`` for a server ``url`` (``http[s]://HOST[:PORT]``, port 8000
    by default), else a ``PersistentClient`` at ``path``. Telemetry off. An unreachable server
    is a :class:`ConfigError`."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if url is None:
        return chromadb.PersistentClient(path=str(path), settings=settings)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
        raise ConfigError(f"`chroma_url` must look like http://HOST:PORT, not {url!r}", "chroma_url")
    try:
        port = parts.port or 8000
    except ValueError:
        raise ConfigError(f"`chroma_url` {url!r} has an invalid port", "chroma_url") from None
    try:
        client = chromadb.HttpClient(host=parts.hostname, port=port, ssl=parts.scheme == "https", settings=settings)
        client.heartbeat()
    except Exception as exc:  # chromadb raises ValueError, httpx errors, ... for a server that is not there
        raise ConfigError(f"cannot reach the chroma server at {url} ({type(exc).__name__}: {exc})") from None
    return client


def _chroma_collection(client, vectors: Vectors, k: int, identity: Mapping[str, object] | None,
                       documents: list[str] | None):
    """The collection of ``identity`` (or, without one, of these exact vectors): reused when it
    holds every vector, else created or completed (``upsert``; a crash mid-way loses nothing)."""
    if identity is None:
        matrix = _materialise(vectors)
        vectors = matrix
        identity = {"vectors_sha256": hashlib.sha256(matrix.tobytes()).hexdigest(), "n_chunks": len(matrix),
                    "dim": int(matrix.shape[1])}
        name = "embedeval-" + identity["vectors_sha256"][:16]
    else:
        name = collection_name(identity)
    ef = max(256, 2 * k)
    metadata = {"hnsw:space": "cosine", "hnsw:search_ef": ef, "hnsw:construction_ef": ef, "hnsw:M": 32,
                **{_META + key: value for key, value in identity.items()}}
    collection = client.get_or_create_collection(name, embedding_function=None, metadata=metadata)
    stored = {key[len(_META):]: value for key, value in (collection.metadata or {}).items() if key.startswith(_META)}
    if _content(stored) != _content(identity):
        raise ConfigError(f"chroma collection {name} holds something else ({stored}); delete it or use another server/path")
    _fit_search(collection, name, ef)
    n = int(identity["n_chunks"])
    if collection.count() != n:
        matrix = _materialise(vectors)
        if len(matrix) != n:
            raise ConfigError(f"{len(matrix)} vectors for a collection of {n} chunks")
        step = client.get_max_batch_size()
        for start in range(0, n, step):
            rows = range(start, min(start + step, n))
            collection.upsert(ids=[str(i) for i in rows], embeddings=matrix[start : rows.stop],
                              documents=[documents[i] for i in rows] if documents else None)
    return collection, n


def _fit_search(collection, name: str, ef: int) -> None:
    """A reused collection keeps the settings it was made with: refuse one that is not in cosine
    space (similarity is 1 - distance), and raise its ``ef_search`` to ``ef`` when a run with a
    smaller ``k`` (or another tool) made it lower."""
    hnsw = (collection.configuration or {}).get("hnsw") or {}
    space = hnsw.get("space", "cosine")
    if space != "cosine":
        raise ConfigError(f"chroma collection {name} measures {space} distance, not cosine; delete it or use another server/path")
    if hnsw.get("ef_search", ef) < ef:
        collection.modify(configuration={"hnsw": {"ef_search": ef}})


def search_chroma(
    vectors: Vectors, queries: np.ndarray, k: int, path: str | Path | None = None, documents: list[str] | None = None,
    url: str | None = None, identity: Mapping[str, object] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The same through a chromadb collection (cosine space, high ``ef`` so HNSW is effectively
    exact at these sizes), on the server at ``url``, in the folder ``path`` or in a temporary one.
    Similarity = 1 - chroma's cosine distance. With ``identity`` (:func:`collection_identity`)
    the collection is named after it and reused when complete: ``vectors`` may then be a function,
    called only when the collection must be filled."""
    with tempfile.TemporaryDirectory() as scratch:
        client = chroma_client(url, path or scratch)
        collection, n = _chroma_collection(client, vectors, k, identity, documents)
        result = collection.query(query_embeddings=np.asarray(queries, dtype=np.float32), n_results=min(k, n),
                                  include=["distances"])
        ids = np.array([[int(i) for i in row] for row in result["ids"]])
        scores = 1.0 - np.array(result["distances"], dtype=float)
        del collection, client
    return scores, ids


def top_k(vectors: Vectors, queries: np.ndarray, k: int, index: str = "faiss", path: str | Path | None = None,
          documents: list[str] | None = None, url: str | None = None,
          identity: Mapping[str, object] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows of ``vectors`` for each query: (cosine similarities, row indices), best first.

    ``vectors`` may be a function returning them (chroma calls it only when it has no complete
    collection of ``identity``). ``path``/``url``: where chromadb keeps the collection (a folder,
    or a server); faiss takes neither."""
    if k < 1:
        raise ConfigError(f"top-k must be >= 1, not {k}")
    if index == "faiss":
        if url is not None or path is not None:
            raise ConfigError("a chroma path or URL needs index chroma, not faiss")
        return search_faiss(vectors, queries, k)
    if index == "chroma":
        if url is not None and path is not None:
            raise ConfigError("give a chroma server URL or a chroma path, not both")
        return search_chroma(vectors, queries, k, path, documents, url, identity)
    raise ConfigError(f"unknown index {index!r}; use one of {', '.join(INDEXES)}")
