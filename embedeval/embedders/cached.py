"""The embedder wrapper that sends a model only what the embedding cache
(:class:`~embedeval.embedders.cache.EmbeddingCache`) does not hold, and stores what it answers.

Texts seen before are never sent to the model again, in this process or the next; duplicates
within one call are embedded once. Vectors are checked (shape, finite, non-zero) before they are
stored; new vectors are committed after every chunk, so a crash loses at most the chunk in flight.
A plan wraps its recorder read-only: nothing is stored, what the model was asked for is kept in
memory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from embedeval.defaults import DEFAULT_COMMIT_EVERY
from embedeval.embedders.base import KIND_WORDS, Embedder, EmbedderWrapper, EmbedStats, TokenIdWrapper, check_texts, check_vectors
from embedeval.embedders.cache import EmbeddingCache, cache_spec, size_refusal, token_prefix_key
from embedeval.embedders.requests import Request
from embedeval.embedders.speed import device_setting, remember_speed
from embedeval.errors import CacheError, InvalidVectorsError
from embedeval.progress import bar


class CachedEmbedder(EmbedderWrapper):
    """An :class:`Embedder` whose every vector goes through an :class:`EmbeddingCache`.

    It is an Embedder itself (the protocol, nothing more): ``name``, ``dim``, ``max_tokens``,
    ``fingerprint``, ``count_tokens`` and ``check`` are the wrapped model's. Misses are
    de-duplicated and sent to the model in chunks of ``commit_every`` texts, each chunk committed
    before the next is sent, with a progress bar if ``progress``. ``stats`` counts what happened.

    ``read_only`` (a plan, around a :class:`~embedeval.embedders.recorder.Recorder`): nothing is
    stored; what the model was asked for is kept in memory instead, so later calls find it as a run
    would find it stored; ``found_keys`` holds the distinct keys found in the cache itself.
    ``seen_keys`` holds the distinct keys asked for, plan or run: :attr:`distinct_texts`, the one
    count of "texts" a plan, a run's last line and README give.
    """

    def __init__(self, embedder: Embedder, cache: EmbeddingCache, commit_every: int = DEFAULT_COMMIT_EVERY, progress: bool = False,
                 read_only: bool = False):
        super().__init__(embedder)
        self.cache = cache
        self.commit_every = commit_every
        self.progress = progress
        self.stats = EmbedStats()
        self.read_only = read_only
        self.key_spec = cache_spec(self.name)  # the spec as vector keys hold it
        self.seen_keys: set[bytes] = set()
        self.found_keys: set[bytes] = set()
        self._planned: dict[bytes, np.ndarray] = {}  # read_only: what was "stored"

    def _lookup(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors of ``keys`` (a plan also finds what it recorded, and counts the keys)."""
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        self.seen_keys.update(keys)
        if self.read_only:
            self.found_keys.update(found)
            found.update((k, self._planned[k]) for k in keys if k in self._planned)
        return found

    @property
    def distinct_texts(self) -> int:
        """The distinct texts (vectors: texts, token-id windows, chunks) asked for so far, each
        counted once however often and in however many calls it was asked for: those found in the
        cache plus those newly embedded."""
        return len(self.seen_keys)

    def _store(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        if self.read_only:
            self._planned.update(zip(keys, vectors, strict=True))
        else:
            self.cache.put_many(self.key_spec, keys, vectors)

    def embed_request(self, request: Request) -> np.ndarray:
        """The vectors of ``request``: the cached ones read, the distinct others (each key once, in
        first-asked order) sent to the model ``commit_every`` at a time, each such part of the
        request (its ``subset``) committed before the next is sent."""
        keys = request.cache_keys(self.key_spec, self.inner.fingerprint)
        found = self._lookup(keys)
        first_row: dict[bytes, int] = {}
        for row, key in enumerate(keys):
            first_row.setdefault(key, row)
        todo = [row for key, row in first_row.items() if key not in found]
        self.stats.requested += len(keys)
        self.stats.cache_hits += sum(key in found for key in keys)
        if todo:
            found.update(self._embed_missing(request, keys, todo))
        return self._stacked(found, keys)

    def _stacked(self, found: dict[bytes, np.ndarray], keys: Sequence[bytes]) -> np.ndarray:
        """The vectors of ``keys`` as one ``(len(keys), dim)`` array; vectors of more than one size
        (a cache written before sizes were fixed) are one :class:`~embedeval.errors.CacheError`
        saying how to mend it."""
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        sizes = sorted({found[k].shape[0] for k in keys})
        if len(sizes) > 1:
            raise CacheError(f"embedding cache {self.cache.path} holds vectors of {' and '.join(map(str, sizes))} values "
                             f"for {self.name} (`embedeval cache verify` lists them); remove them with "
                             f"`embedeval cache clear` and `embedder` {self.name}", "embedder")
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def check_size(self) -> None:
        """One :class:`~embedeval.errors.InvalidVectorsError` (:func:`size_refusal`), before any work,
        when the model's vectors (once it knows their size: an API model of a server of one's own
        after its check) have another size than those cached for it."""
        dim, fixed = self.inner.dim, self.cache.fixed_dim(self.name)
        if dim and fixed is not None and dim != fixed:
            raise InvalidVectorsError(size_refusal(self.name, dim, fixed), "embedder")

    @contextlib.contextmanager
    def _timed(self, request: Request) -> Iterator[None]:
        """Time one model call for documents into ``stats`` (``document_seconds``, and the request's
        tokens in ``document_tokens``: a token-id sequence's length, a text's tokens as the model
        counts them, at most its window): a local model's weights are loaded first, outside the
        clock (loading is not embedding). A plan (``read_only``) times nothing."""
        if request.kind != "document" or self.read_only:
            yield
            return
        if getattr(self.inner, "loaded", True) is False:
            _ = self.inner.model  # loads the weights (the property has that effect)
        start = time.perf_counter()
        yield
        self.stats.document_seconds += time.perf_counter() - start
        self.stats.document_tokens += request.tokens(lambda texts: [min(n, self.max_tokens) for n in self.inner.count_tokens(texts)])

    @property
    def _local(self) -> bool:
        """Whether the model runs here (a local model, with a device setting), not behind a paid API."""
        return hasattr(getattr(self.inner, "options", None), "device")

    def _embed_missing(self, request: Request, keys: list[bytes], todo: list[int]) -> dict[bytes, np.ndarray]:
        """The vectors of ``request``'s rows ``todo`` from the model, ``commit_every`` rows a call,
        each call's vectors checked, then stored on a thread of their own while the next call
        runs (a local model is not kept waiting for the disk; an API model's next, paid, call
        waits for the commit). A call's vectors are committed before
        the next call's are stored, and a pending commit is finished on any error: a killed run
        loses at most the call in flight and the one being committed; a failed commit stops the
        run at the next call's end."""
        out: dict[bytes, np.ndarray] = {}
        step = self.commit_every
        with bar(total=len(todo), desc=f"embedding {KIND_WORDS[request.kind]} ({self.name})", unit=request.unit,
                 enabled=self.progress, delay=0.5) as shown, ThreadPoolExecutor(max_workers=1) as writer:
            committing = None
            for start in range(0, len(todo), step):
                rows = todo[start : start + step]
                part = request.subset(rows)
                with self._timed(part):
                    vectors = check_vectors(self.inner.embed_request(part), len(rows), self.dim, self.name)
                chunk_keys = [keys[row] for row in rows]
                self.stats.model_calls += 1
                self.stats.embedded += len(chunk_keys)
                if committing is not None:
                    committing.result()  # the previous call's commit, its failure raised here
                committing = writer.submit(self._store, chunk_keys, vectors)
                if not self._local:  # a paid call is not sent while its predecessor's commit may still fail
                    committing.result()
                out.update(zip(chunk_keys, vectors, strict=True))
                shown.update(len(chunk_keys))
            if committing is not None:
                committing.result()
        if request.kind == "document" and not self.read_only and self._local:
            # a local model's pace on this machine, for a later plan (embedeval.embedders.speed)
            remember_speed(self.cache, self.name, device_setting(self.inner), self.stats.document_seconds, self.stats.document_tokens)
        return out


class CachedTokenIdEmbedder(CachedEmbedder, TokenIdWrapper):
    """A :class:`CachedEmbedder` of a :class:`~embedeval.embedders.base.TokenIdEmbedder`, whose
    token-id requests are keyed on exactly the ids the model read (two texts whose windows hold the
    same ids share a vector); also ``token_ids`` with a limit, whose prefixes are cached under
    :func:`token_prefix_key`, so a rerun finds the ids (and with them the vectors) of long texts
    without tokenising them again."""

    def token_ids(self, texts: Sequence[str], limit: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """The model's ``token_ids``; with a ``limit``, per text its first ``limit + 1`` ids and
        offsets (all of them when it has no more: so whether a text exceeds ``limit`` still shows),
        read from the cache where this tokenizer met the same text with the same limit before,
        else tokenised (counted in ``stats.tokenized``) and stored."""
        if limit is None:
            return self.inner.token_ids(texts, None)
        texts = check_texts(texts, "document")
        tokenizer = self.inner.token_fingerprint
        keys = [token_prefix_key(tokenizer, limit, text) for text in texts]
        found = self.cache.get_token_prefixes(list(dict.fromkeys(keys)))
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
        if missing:
            fresh = {key: (np.asarray(ids[: limit + 1], dtype=np.int32), np.asarray(offsets[: limit + 1], dtype=np.int32).reshape(-1, 2))
                     for key, (ids, offsets) in zip(missing, self.inner.token_ids(list(missing.values()), limit), strict=True)}
            if not self.read_only:
                self.cache.put_token_prefixes(fresh)
            self.stats.tokenized += len(fresh)
            found.update(fresh)
        return [found[key] for key in keys]
