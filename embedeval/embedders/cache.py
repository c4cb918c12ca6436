"""Persistent embedding cache (SQLite, WAL): the store. The embedder wrapper that reads and fills
it is :mod:`embedeval.embedders.cached`.

The file holds four tables:

- ``embeddings``: the vectors (below);
- ``token_prefixes``: the first token ids (and their character offsets) a tokenizer gave a
  text, keyed on :func:`token_prefix_key` (the tokenizer's fingerprint, the limit and the text),
  so that a rerun finds the ids a model reads of a text (the vector's key) without tokenising
  it again;
- ``model_facts``: what a local model says about itself once loaded (its fingerprint, dimension,
  token window, special and prompt ids, tokenizer fingerprint), keyed on its files and the library
  versions, so that a run whose vectors are all cached never loads the weights
  (:class:`~embedeval.embedders.local.SentenceTransformerEmbedder`);
- ``embedder_dims``: the size of each embedder spec's vectors, fixed by its first stored vector
  (:meth:`EmbeddingCache.fixed_dim`): a server that starts answering another size under the same
  model id is refused (:meth:`EmbeddingCache.put_many`), and nothing of that answer is stored.

Vector key: ``sha256(spec \\0 fingerprint \\0 kind \\0 text)`` for a text, the request's own for other
inputs (``cache_keys`` of each request type, :mod:`embedeval.embedders.requests`), where the spec is
written without ``key_env`` (:func:`cache_spec`: which variable holds a key changes no vector) and the
fingerprint is the model's own (:attr:`Embedder.fingerprint`: weights, ``max_seq_length``,
prompts, pooling, API dimensions and task), so an edited model folder never gets stale vectors;
value: the float32 vector as a blob with a checksum of key and vector, verified on every read.
Vectors are checked (shape, finite, non-zero) before they are stored (:mod:`embedeval.embedders.cached`).

Every row of every table carries a checksum of its key and value, verified on every read; a
damaged row is dropped and recomputed.

A file's format is read from its tables, not from SQLite's ``user_version`` alone (a copy made with
``sqlite3 .dump`` or :meth:`sqlite3.Connection.iterdump` has it reset to 0). A vector table without a
``checksum`` column is format 1, written by embedeval 0.1 (keys without a fingerprint): this version
does not read it and refuses the file with one :class:`~embedeval.errors.CacheError`
(:meth:`EmbeddingCache._refuse_format_1`), before anything is written to it, for every command, so
its vectors are never dropped unasked. Format 2 files (no token prefixes, no model facts) gain the
two tables and keep every vector; format 3 files gain ``embedder_dims``, filled from the vectors
they hold. The side table :data:`FORMAT_1_TABLE` an earlier embedeval left beside a format-2 table
is neither read nor removed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shlex
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from embedeval.embedders import onnx
from embedeval.embedders.options import split_spec
from embedeval.errors import CacheError, InvalidVectorsError
from embedeval.locks import CACHE_BUSY_SECONDS
from embedeval.messages import warn
from embedeval.paths import CACHE_ENV, default_cache_dir

CACHE_FILENAME = "embeddings.sqlite"
CACHE_FORMAT = 4
#: Where an earlier embedeval kept a format-1 file's vectors after upgrading it (left as it is, never read).
FORMAT_1_TABLE = "embeddings_v1"
#: Seconds a writer waits for another process's write lock before giving up (SQLite's busy timeout:
#: :data:`~embedeval.locks.CACHE_BUSY_SECONDS`, beside the waits of the other locks).
LOCK_TIMEOUT = CACHE_BUSY_SECONDS
_SELECT_CHUNK = 500  # SQLite host-parameter limit is 999 on old builds


#: Spec options that change no vector and so stay out of cache keys: which variable holds a key.
KEYLESS_OPTIONS = ("key_env",)


def cache_spec(spec: str) -> str:
    """``spec`` as vector keys hold it: without :data:`KEYLESS_OPTIONS` (renaming the variable that
    holds a server's key re-embeds nothing); a spec without them is kept as it is, byte for byte."""
    base, query = split_spec(spec)
    pairs = query.split("&") if query else []
    kept = [pair for pair in pairs if pair.partition("=")[0] not in KEYLESS_OPTIONS]
    return spec if len(kept) == len(pairs) else base + ("?" + "&".join(kept) if kept else "")


def token_prefix_key(tokenizer: str, limit: int, text: str) -> bytes:
    """blake2b (32 bytes) over a tokenizer's fingerprint, a token limit and a text: the key of the
    text's first ``limit + 1`` token ids by that tokenizer."""
    digest = hashlib.blake2b(f"{tokenizer}\0{limit}\0".encode(), digest_size=32)
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.digest()


def row_checksum(key: bytes, vector: bytes) -> bytes:
    """blake2b (8 bytes) over a row's key and vector bytes: a flipped byte or a vector stored
    under another key fails it."""
    return hashlib.blake2b(key + vector, digest_size=8).digest()


def row_intact(key: bytes, dim: int, vector: bytes, checksum: bytes) -> bool:
    """Whether a stored row is as it was written: its checksum matches and it holds ``dim`` floats."""
    return checksum == row_checksum(key, vector) and len(vector) == 4 * dim


def dim_checksum(spec: str, dim: int) -> bytes:
    """The checksum of an ``embedder_dims`` row (:func:`row_checksum` of the spec and the size)."""
    return row_checksum(spec.encode("utf-8"), str(int(dim)).encode())


def size_refusal(spec: str, dim: int, fixed: int) -> str:
    """Why vectors of ``dim`` values are not stored for ``spec`` whose cached vectors have ``fixed``,
    and how to mend it (naming the ``embedder`` option of ``embedeval cache clear``, which the
    command line says as its flag)."""
    return (f"{spec} answered vectors of {dim} values, but its cached vectors have {fixed} (an embedder's size is "
            f"fixed by its first stored vector), so none of them was stored; if the model behind {spec} has changed, "
            f"remove its old vectors with `embedeval cache clear` and `embedder` {spec}, or use another cache folder")


def _is_busy(exc: Exception) -> bool:
    """Whether an SQLite error says another connection holds a lock."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


#: Bytes per page of a new cache file (SQLite's default is 4,096): see :class:`EmbeddingCache`.
PAGE_SIZE = 16_384


class EmbeddingCache:
    """A SQLite file of vectors keyed by their requests' ``cache_keys``. Safe for concurrent processes.

    Every row carries a checksum of its key and vector (:func:`row_checksum`), checked on each
    read: a row that fails it (a flipped byte, a torn write) is deleted with one warning line and
    its text embedded again. :meth:`verify` checks the whole file. ``create=False`` (a plan): where
    the file does not exist yet, an empty cache in memory instead (no folder or file made).
    """

    def __init__(self, directory: str | os.PathLike | None = None, timeout: float = LOCK_TIMEOUT, create: bool = True):
        self.directory = Path(directory).expanduser() if directory else default_cache_dir()
        self.path = self.directory / CACHE_FILENAME
        self.timeout = timeout
        self._lock = threading.Lock()
        with self._guard():
            if create or self.path.exists():
                self.directory.mkdir(parents=True, exist_ok=True)
                where = self.path
            else:  # a plan of a cache not made yet: an empty one in memory, no file or folder left behind
                where = ":memory:"
            self._conn = sqlite3.connect(where, timeout=timeout, check_same_thread=False, isolation_level=None)
            # a new file's pages hold a 1,024-d vector's row whole (a 4 KB page spills a 384-d one onto
            # overflow pages: 4,691 bytes per vector, not 1,909); an existing file keeps its own
            self._conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            self._refuse_format_1()  # before the first write (the switch to WAL, the upgrade)
            self._enter_wal()
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._upgrade()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Turn SQLite and file-system failures into one :class:`CacheError` that says what is true."""
        try:
            yield
        except (sqlite3.DatabaseError, OSError) as exc:
            raise self._error(exc) from None

    def _enter_wal(self) -> None:
        """Switch the file to WAL mode. SQLite answers this pragma "locked" at once, without its busy
        timeout, while another process is creating or switching the same file, so it is retried
        (random exponential waits, 10 ms to 1 s) until :attr:`timeout` seconds have passed."""
        for attempt in Retrying(
            retry=retry_if_exception(lambda exc: isinstance(exc, sqlite3.OperationalError) and _is_busy(exc)),
            wait=wait_random_exponential(multiplier=0.01, max=1.0),
            stop=stop_after_delay(self.timeout),
            reraise=True,
        ):
            with attempt:
                self._conn.execute("PRAGMA journal_mode=WAL")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taken at once, so concurrent writers queue instead of deadlocking)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    def _table_exists(self, name: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return self._conn.execute(query, (name,)).fetchone() is not None

    def _refuse_format_1(self) -> None:
        """Refuse a file written by embedeval 0.1 (format 1): its vector table has no ``checksum``
        column. Told by the table's shape, not by ``user_version``, which a copy made with
        ``.dump`` or ``iterdump()`` resets to 0 (such a copy of a current file reads as current).
        Nothing is written to the file: the connection is closed and one :class:`CacheError` says
        how to remove it or where to keep it."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(embeddings)")}
        if not columns or "checksum" in columns:
            return
        self._conn.close()
        raise CacheError(f"embedding cache {self.path} was written by embedeval 0.1 (format 1: keys without the model's "
                         f"fingerprint, rows without a checksum), which this version no longer reads; nothing in it was "
                         f"changed: remove it (embedeval cache clear, given this cache folder, {shlex.quote(str(self.directory))}; "
                         f"its vectors are embedded again as they are asked for) or move it away to keep it")

    def _upgrade(self) -> None:
        """Create the tables that are missing (a format-2 file gains the token prefixes and model
        facts, a format-3 file ``embedder_dims``) and record the format in ``user_version`` (a
        copy made with ``.dump`` has it 0). A format-1 file never gets here (:meth:`_refuse_format_1`)."""
        with self._transaction() as conn:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings ("
                " key BLOB PRIMARY KEY, spec TEXT NOT NULL, dim INTEGER NOT NULL,"
                " vector BLOB NOT NULL, checksum BLOB NOT NULL) WITHOUT ROWID"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS token_prefixes ("
                " key BLOB PRIMARY KEY, ids BLOB NOT NULL, offsets BLOB NOT NULL, checksum BLOB NOT NULL) WITHOUT ROWID"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS model_facts ("
                " key BLOB PRIMARY KEY, facts TEXT NOT NULL, checksum BLOB NOT NULL) WITHOUT ROWID"
            )
            if not self._table_exists("embedder_dims"):
                conn.execute("CREATE TABLE embedder_dims (spec TEXT PRIMARY KEY, dim INTEGER NOT NULL, checksum BLOB NOT NULL)"
                             " WITHOUT ROWID")
                self._record_dims(conn)
            if found < CACHE_FORMAT:  # a newer format (a later embedeval) keeps its number
                conn.execute(f"PRAGMA user_version = {CACHE_FORMAT}")

    @staticmethod
    def _record_dims(conn: sqlite3.Connection) -> None:
        """Fill ``embedder_dims`` from the vectors a file already holds: per spec its most common
        size (a file that mixes sizes, written before sizes were fixed, is reported by :meth:`verify`)."""
        counts: dict[str, dict[int, int]] = {}
        for spec, dim, n in conn.execute("SELECT spec, dim, COUNT(*) FROM embeddings GROUP BY spec, dim"):
            counts.setdefault(spec, {})[dim] = n
        rows = [(spec, dim, dim_checksum(spec, dim)) for spec, sizes in counts.items()
                for dim in [max(sizes, key=lambda d: (sizes[d], -d))]]
        conn.executemany("INSERT INTO embedder_dims (spec, dim, checksum) VALUES (?, ?, ?)", rows)

    @staticmethod
    def _fixed_dim_in(conn: sqlite3.Connection, spec: str) -> int | None:
        """The size of ``spec``'s vectors: its ``embedder_dims`` row (every store records one, so
        without one the spec has no vectors: None), or where that fails its checksum the size of one
        of its stored vectors."""
        row = conn.execute("SELECT dim, checksum FROM embedder_dims WHERE spec = ?", (spec,)).fetchone()
        if row is None or row[1] == dim_checksum(spec, row[0]):
            return None if row is None else int(row[0])
        row = conn.execute("SELECT dim FROM embeddings WHERE spec = ? LIMIT 1", (spec,)).fetchone()
        return None if row is None else int(row[0])

    def fixed_dim(self, spec: str) -> int | None:
        """The size of ``spec``'s cached vectors, fixed by its first stored vector; None when none is stored."""
        with self._guard(), self._lock:
            return self._fixed_dim_in(self._conn, spec)

    def _error(self, exc: Exception) -> CacheError:
        """A file where the folder should be, locked, read-only, full or corrupt: only the last is
        cured by clearing the cache."""
        text = str(exc).lower()
        where = f"embedding cache {self.path}"
        in_the_way = next((p for p in (self.directory, *self.directory.parents) if p.exists()), None)
        if in_the_way is not None and not in_the_way.is_dir():
            return CacheError(f"the embedding cache folder {self.directory} cannot be made: {in_the_way} is a file, not a folder; "
                              f"point `cache_dir` or {CACHE_ENV} at a folder", "cache_dir")
        if _is_busy(exc):
            return CacheError(f"{where} is locked by another process (waited {self.timeout:g} s); "
                              "try again when that run has finished")
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "disk is full" in text:
            return CacheError(f"the disk holding {where} is full ({exc}); free space or point {CACHE_ENV} elsewhere")
        if ("readonly" in text or "read-only" in text or isinstance(exc, PermissionError)
                or (self.directory.exists() and not os.access(self.directory, os.W_OK))):
            return CacheError(f"{where} is read-only ({exc}); point {CACHE_ENV} or --cache-dir at a writable folder")
        return CacheError(f"{where} is corrupt or unreadable ({exc}); "
                          f"remove it with `embedeval cache clear` or point {CACHE_ENV} elsewhere")

    def _select_in(self, query: str, keys: Sequence[bytes]) -> Iterator[tuple]:
        """Rows of ``query`` (which ends in ``WHERE key IN``) for ``keys``, a chunk at a time."""
        for start in range(0, len(keys), _SELECT_CHUNK):
            chunk = keys[start : start + _SELECT_CHUNK]
            yield from self._conn.execute(f"{query} ({','.join('?' * len(chunk))})", chunk)

    def _get_intact(self, table: str, values: str, keys: Sequence[bytes], intact, what: str) -> list[tuple]:
        """Rows ``(key, <values>, checksum)`` of ``table`` for ``keys`` that pass ``intact(row)``;
        rows failing it are left out (one warning line naming ``what`` they are), so they are
        computed again, and deleted if the cache is writable."""
        good: list[tuple] = []
        damaged: list[tuple] = []
        with self._guard(), self._lock:
            for row in self._select_in(f"SELECT key, {values}, checksum FROM {table} WHERE key IN", keys):
                (good if intact(row) else damaged).append(row)
        if damaged:
            warn(f"{len(damaged)} cached {what} in {self.path} failed their checksum; they are computed again")
            with contextlib.suppress(sqlite3.Error), self._lock, self._transaction() as conn:
                # Only the damaged version: a row another process has repaired meanwhile stays.
                conn.executemany(f"DELETE FROM {table} WHERE key = ? AND checksum = ?", [(r[0], r[-1]) for r in damaged])
        return good

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """Vectors for the keys that are present and intact; rows failing their checksum are
        left out (one warning line), so their texts are embedded again, and deleted if the cache
        is writable."""
        rows = self._get_intact("embeddings", "dim, vector", keys, lambda r: row_intact(r[0], r[1], r[2], r[3]), "vector(s)")
        return {key: np.frombuffer(blob, dtype=np.float32) for key, _, blob, _ in rows}

    def get_token_prefixes(self, keys: Sequence[bytes]) -> dict[bytes, tuple[np.ndarray, np.ndarray]]:
        """Token ids (int32) and their ``(start, end)`` character offsets (int32, shape ``(n, 2)``)
        stored under :func:`token_prefix_key` keys, for those present and intact."""
        rows = self._get_intact("token_prefixes", "ids, offsets", keys,
                                lambda r: r[3] == row_checksum(r[0], r[1] + r[2]) and 2 * len(r[1]) == len(r[2]),
                                "token prefix(es)")
        return {key: (np.frombuffer(ids, dtype="<i4").astype(np.int32, copy=False),
                      np.frombuffer(offsets, dtype="<i4").astype(np.int32, copy=False).reshape(-1, 2))
                for key, ids, offsets, _ in rows}

    def put_token_prefixes(self, prefixes: dict[bytes, tuple[np.ndarray, np.ndarray]]) -> None:
        """Store token ids and offsets under their keys (one transaction; existing keys are kept)."""
        rows = []
        for key, (ids, offsets) in prefixes.items():
            ids_blob, offsets_blob = np.asarray(ids, dtype="<i4").tobytes(), np.asarray(offsets, dtype="<i4").tobytes()
            rows.append((key, ids_blob, offsets_blob, row_checksum(key, ids_blob + offsets_blob)))
        with self._guard(), self._lock, self._transaction() as conn:
            conn.executemany("INSERT OR IGNORE INTO token_prefixes (key, ids, offsets, checksum) VALUES (?, ?, ?, ?)", rows)

    def get_facts(self, key: bytes) -> dict | None:
        """The model facts stored under ``key`` (a JSON object), if present and intact."""
        rows = self._get_intact("model_facts", "facts", [key], lambda r: r[2] == row_checksum(r[0], r[1].encode()),
                                "model description(s)")
        return json.loads(rows[0][1]) if rows else None

    def put_facts(self, key: bytes, facts: dict) -> None:
        """Store (or replace) the model facts under ``key``."""
        text = json.dumps(facts, sort_keys=True)
        with self._guard(), self._lock, self._transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO model_facts (key, facts, checksum) VALUES (?, ?, ?)",
                         (key, text, row_checksum(key, text.encode())))

    def put_many(self, spec: str, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store vectors with their checksums (one transaction; existing keys are kept). The first
        vectors stored for ``spec`` fix its size; vectors of another size are one
        :class:`~embedeval.errors.InvalidVectorsError` (:func:`size_refusal`) and none is stored."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = vectors.shape[1]
        rows = []
        for key, vector in zip(keys, vectors, strict=True):
            blob = vector.tobytes()
            rows.append((key, spec, dim, blob, row_checksum(key, blob)))
        with self._guard(), self._lock, self._transaction() as conn:
            fixed = self._fixed_dim_in(conn, spec)
            if fixed is not None and fixed != dim:
                raise InvalidVectorsError(size_refusal(spec, dim, fixed), "embedder")
            conn.execute("INSERT OR REPLACE INTO embedder_dims (spec, dim, checksum) VALUES (?, ?, ?)",
                         (spec, dim, dim_checksum(spec, dim)))
            conn.executemany(
                "INSERT OR IGNORE INTO embeddings (key, spec, dim, vector, checksum) VALUES (?, ?, ?, ?, ?)", rows
            )

    def remove_spec(self, spec: str) -> int:
        """Delete every vector of ``spec`` (and its fixed size). Returns how many vectors were removed."""
        with self._guard(), self._lock, self._transaction() as conn:
            removed = conn.execute("DELETE FROM embeddings WHERE spec = ?", (spec,)).rowcount
            conn.execute("DELETE FROM embedder_dims WHERE spec = ?", (spec,))
        return removed

    def verify(self) -> dict[str, object]:
        """Check the whole cache: SQLite's ``integrity_check``, every vector's checksum, that each
        spec's vectors have one size, and that every exported ONNX graph matches the sha256 recorded
        at its export (nothing is changed; token prefixes and model facts are checked as they are
        read). Returns ``{"integrity": "ok" or SQLite's findings, "rows": n, "bad_checksums": n,
        "mixed_sizes": {spec: {size: vectors}} for specs of more than one size, "bad_graphs":
        {path: what is wrong}}``."""
        with self._guard(), self._lock:
            findings = [row[0] for row in self._conn.execute("PRAGMA integrity_check")]
            rows = bad = 0
            sizes: dict[str, dict[int, int]] = {}
            for key, spec, dim, blob, checksum in self._conn.execute("SELECT key, spec, dim, vector, checksum FROM embeddings"):
                rows += 1
                bad += not row_intact(key, dim, blob, checksum)
                per_size = sizes.setdefault(spec, {})
                per_size[dim] = per_size.get(dim, 0) + 1
        mixed = {spec: per_size for spec, per_size in sorted(sizes.items()) if len(per_size) > 1}
        graphs = {str(path): problem for path, problem in onnx.check_graphs(self.directory).items()}
        return {"integrity": "; ".join(findings), "rows": rows, "bad_checksums": bad, "mixed_sizes": mixed, "bad_graphs": graphs}

    def info(self) -> dict[str, object]:
        """Path, size on disk, vector counts per embedder spec, and stored token prefixes."""
        with self._guard(), self._lock:
            per_spec = dict(self._conn.execute("SELECT spec, COUNT(*) FROM embeddings GROUP BY spec ORDER BY spec"))
            prefixes = self._conn.execute("SELECT COUNT(*) FROM token_prefixes").fetchone()[0]
        size = sum(p.stat().st_size for p in self.directory.glob(CACHE_FILENAME + "*") if p.is_file())
        return {"path": str(self.path), "bytes": size, "vectors": sum(per_spec.values()), "per_spec": per_spec,
                "token_prefixes": prefixes}

    def close(self) -> None:
        self._conn.close()


def clear_cache(directory: str | os.PathLike | None = None) -> list[Path]:
    """Delete the cache file (and its WAL/SHM files), even a corrupt one, and the exported ONNX
    graphs (:func:`~embedeval.embedders.onnx.clear_graphs`). Returns what was removed."""
    directory = Path(directory).expanduser() if directory else default_cache_dir()
    removed = []
    for path in sorted(directory.glob(CACHE_FILENAME + "*")):
        path.unlink()
        removed.append(path)
    return removed + onnx.clear_graphs(directory)


class ReadOnlyFacts:
    """An :class:`EmbeddingCache`'s model facts, read but never written (a plan's local model)."""

    def __init__(self, cache: EmbeddingCache):
        self.cache = cache
        self.directory = cache.directory

    def get_facts(self, key: bytes) -> dict | None:
        return self.cache.get_facts(key)

    def put_facts(self, key: bytes, facts: dict) -> None:
        """Nothing: a plan stores nothing."""

    def holds_vectors(self, spec: str) -> bool:
        """Whether the cache holds any vector of the embedder ``spec`` (its fixed size says so)."""
        return self.cache.fixed_dim(cache_spec(spec)) is not None
