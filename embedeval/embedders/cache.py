"""Persistent embedding cache (SQLite, WAL) and the embedder wrapper that uses it.

Key: ``sha256(spec \\0 kind \\0 text)``; value: the float32 vector as a blob. Texts seen before
are never sent to the model again, in this process or the next; duplicates within one call are
embedded once. New vectors are committed after every chunk, so a crash loses at most the chunk
in flight.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from embedeval.embedders.base import Embedder, Kind, check_texts
from embedeval.errors import CacheError
from embedeval.paths import CACHE_ENV, default_cache_dir

CACHE_FILENAME = "embeddings.sqlite"
_SELECT_CHUNK = 500  # SQLite host-parameter limit is 999 on old builds


def cache_key(spec: str, kind: str, text: str) -> bytes:
    """sha256 over spec, kind and text, separated by NUL bytes."""
    return hashlib.sha256(f"{spec}\0{kind}\0{text}".encode("utf-8")).digest()


class EmbeddingCache:
    """A SQLite file of vectors keyed by :func:`cache_key`. Safe for concurrent processes."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory).expanduser() if directory else default_cache_dir()
        self.path = self.directory / CACHE_FILENAME
        self._lock = threading.Lock()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings ("
                " key BLOB PRIMARY KEY, spec TEXT NOT NULL, dim INTEGER NOT NULL,"
                " vector BLOB NOT NULL) WITHOUT ROWID"
            )
            self._conn.commit()
        except (sqlite3.DatabaseError, OSError) as exc:
            raise self._error(exc) from None

    def _error(self, exc: Exception) -> CacheError:
        return CacheError(
            f"embedding cache {self.path} is corrupt or unreadable ({exc}); "
            f"remove it with `embedeval cache clear` or point {CACHE_ENV} elsewhere"
        )

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """Vectors for the keys that are present."""
        found: dict[bytes, np.ndarray] = {}
        try:
            with self._lock:
                for start in range(0, len(keys), _SELECT_CHUNK):
                    chunk = keys[start : start + _SELECT_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows = self._conn.execute(
                        f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk
                    )
                    for key, blob in rows:
                        found[key] = np.frombuffer(blob, dtype=np.float32)
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None
        return found

    def put_many(self, spec: str, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store vectors (one transaction; existing keys are kept)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        rows = [(k, spec, vectors.shape[1], v.tobytes()) for k, v in zip(keys, vectors)]
        try:
            with self._lock, self._conn:
                self._conn.executemany(
                    "INSERT OR IGNORE INTO embeddings (key, spec, dim, vector) VALUES (?, ?, ?, ?)",
                    rows,
                )
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None

    def info(self) -> dict[str, object]:
        """Path, size on disk and vector counts per embedder spec."""
        try:
            with self._lock:
                per_spec = dict(
                    self._conn.execute("SELECT spec, COUNT(*) FROM embeddings GROUP BY spec ORDER BY spec")
                )
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None
        size = sum(p.stat().st_size for p in self.directory.glob(CACHE_FILENAME + "*") if p.is_file())
        return {"path": str(self.path), "bytes": size, "vectors": sum(per_spec.values()), "per_spec": per_spec}

    def close(self) -> None:
        self._conn.close()


def clear_cache(directory: str | os.PathLike | None = None) -> list[Path]:
    """Delete the cache file (and its WAL/SHM files), even a corrupt one. Returns what was removed."""
    directory = Path(directory).expanduser() if directory else default_cache_dir()
    removed = []
    for path in sorted(directory.glob(CACHE_FILENAME + "*")):
        path.unlink()
        removed.append(path)
    return removed


class CachedEmbedder:
    """Wraps an :class:`Embedder` so every vector goes through an :class:`EmbeddingCache`.

    Misses are de-duplicated and sent to the model in chunks of ``chunk_size`` texts, each chunk
    committed before the next is sent. ``calls``/``texts_embedded`` count model work.
    """

    def __init__(self, embedder: Embedder, cache: EmbeddingCache, chunk_size: int = 256, progress: bool = False):
        self.inner = embedder
        self.cache = cache
        self.chunk_size = chunk_size
        self.progress = progress
        self.name = embedder.name
        self.calls = 0
        self.texts_embedded = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def __getattr__(self, attribute: str):
        # Expose backend extras (e.g. ``tokenizer``) without re-declaring them.
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def embed(self, texts: Sequence[str], kind: Kind = "document", progress: bool | None = None) -> np.ndarray:
        texts = check_texts(texts, kind)
        keys = [cache_key(self.name, kind, t) for t in texts]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts):
            if key not in found and key not in missing:
                missing[key] = text
        if missing:
            found.update(self._embed_missing(missing, kind, self.progress if progress is None else progress))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def _embed_missing(self, missing: dict[bytes, str], kind: Kind, progress: bool) -> dict[bytes, np.ndarray]:
        keys, texts = list(missing), list(missing.values())
        out: dict[bytes, np.ndarray] = {}
        with tqdm(total=len(texts), desc=f"embedding ({self.name})", unit="text", disable=not progress) as bar:
            for start in range(0, len(texts), self.chunk_size):
                chunk_keys = keys[start : start + self.chunk_size]
                vectors = self.inner.embed(texts[start : start + self.chunk_size], kind=kind)
                self.calls += 1
                self.texts_embedded += len(chunk_keys)
                self.cache.put_many(self.name, chunk_keys, vectors)
                out.update(zip(chunk_keys, vectors))
                bar.update(len(chunk_keys))
        return out
