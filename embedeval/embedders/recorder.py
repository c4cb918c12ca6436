"""A model stand-in for plans: it records what a run would send to the model, and sends nothing.

:func:`recording` wraps a model so that a run's embedding steps can go through the very code a real
run takes (strategies, the cache's look-ups, de-duplication, the cache's chunks of
``commit_every`` texts), while every miss is written down instead of embedded. Its vectors are
stand-ins (a unit vector drawn from a hash of the input), never stored: the cache wrapper around a
recorder is read-only (:class:`~embedeval.embedders.cache.CachedEmbedder` with ``read_only``).

What is recorded, per model call as a real run would make it:

- ``items``: each distinct input once (a text, or a tuple of token ids for a model fed ids; for
  late chunking the windows read), in the order the run first asks for them; ``inputs``: the
  inputs the model is given, a window read again for another group of chunks counted again;
- ``tokens``: for an API model, the tokens of the inputs as they would be sent (cut to the window
  by :meth:`~embedeval.embedders.http.APIEmbedder.fit`) and ``requests``, the requests its batches
  (:meth:`~embedeval.embedders.http.APIEmbedder.batches`) would make; for a local model the
  content tokens it would read: a text's tokens up to the window, special tokens and prompt left
  out (:meth:`TokenIdRecorder.tokens_read`; an expanded query longer than the window counts the
  window, not its whole length).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from embedeval.embedders.base import EmbedderWrapper, Kind, TokenIdWrapper, check_texts, l2_normalize
from embedeval.embedders.http import APIEmbedder
from embedeval.errors import InputError

#: The vector size of a recorder whose model's size is not known before its first answer.
STAND_IN_DIM = 8


class StretchedIds(NamedTuple):
    """What a plan records of a context-extension input (``embed_stretched``): its ids and how
    they are read (:class:`~embedeval.embedders.stretch.Stretch`)."""

    stretch: object
    ids: tuple[int, ...]


def stand_in_vectors(items: Sequence, dim: int) -> np.ndarray:
    """A unit vector per item (a text, token ids or :class:`StretchedIds`) drawn from the sha256
    of the item (its bytes: UTF-8, or int64 ids), stretched to ``dim`` bytes by SHAKE-256: distinct
    inputs get distinct directions, so nothing downstream sees ties it would not see in a real run.
    Hashes, not a random generator per item: thousands of haystacks a model stand in for cost
    milliseconds."""
    def raw(item) -> bytes:
        item = item.ids if isinstance(item, StretchedIds) else item
        return item.encode() if isinstance(item, str) else np.asarray(item, dtype=np.int64).tobytes()

    drawn = b"".join(hashlib.shake_256(hashlib.sha256(raw(item)).digest()).digest(dim) for item in items)
    vectors = np.frombuffer(drawn, dtype=np.uint8).reshape(len(items), dim).astype(np.float32) - 127.5  # never all zero
    return l2_normalize(vectors)


class Recorder(EmbedderWrapper):
    """Records the model calls a run would make (see the module docstring) and answers them with
    stand-in vectors. The cache in front of it passes on only what a run would send; for a model on
    a server of one's own the recorder names a fingerprint of its own (the real one needs the
    server's answer), so that cache finds nothing stored but still de-duplicates."""

    def __init__(self, inner):
        super().__init__(inner)
        self.items: dict[tuple[str, object], None] = {}  # distinct (kind, input), in first-asked order
        self.inputs = 0  # inputs the model is given, repeats across calls included (late chunking's windows)
        self.tokens = 0
        self.requests = 0
        self.timer = None  # a local model loading in a process of its own, to be timed there (embedeval.plan.timed_apart)

    @property
    def dim(self) -> int:
        return self.inner.dim or STAND_IN_DIM

    @property
    def api(self) -> APIEmbedder | None:
        """The API model recorded, or None for a local one."""
        return self.inner if isinstance(self.inner, APIEmbedder) else None

    @property
    def asks_server(self) -> bool:
        """Whether the model's fingerprint needs its server's answer (a server of one's own)."""
        return self.api is not None and self.api.options.own_server

    @property
    def fingerprint(self) -> str:
        return "planned: the server is not asked" if self.asks_server else self.inner.fingerprint

    def check(self) -> None:
        """Nothing: a plan sends no request."""

    def _record(self, inputs: list, kind: Kind, sizes: Sequence[int] | None = None) -> np.ndarray:
        """Note one model call as the run would make it (``sizes``: a local model's tokens per
        input) and answer every input with its stand-in vector."""
        if inputs:
            self.inputs += len(inputs)
            self.items.update(dict.fromkeys((kind, item) for item in inputs))
            if self.api is not None:
                _, counts = self.api.fit(list(inputs))
                self.tokens += sum(counts)
                self.requests += len(self.api.batches(counts))
            else:
                self.tokens += sum(sizes)
        return self._stand_ins(inputs)

    def _stand_ins(self, items: Sequence) -> np.ndarray:
        return stand_in_vectors(items, self.dim).astype(np.float32, copy=False)

    def tokens_read(self, texts: Sequence[str], kind: Kind) -> list[int]:
        """The tokens a local model reads of each text: its tokens, at most the model's window
        (``max_tokens``)."""
        return [min(n, self.inner.max_tokens) for n in self.inner.count_tokens(texts)]

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        return self._record(texts, kind, None if self.api is not None else self.tokens_read(texts, kind))


class APILateRecorder(Recorder):
    """A :class:`Recorder` of an API with late chunking of its own (``jina:``): each window, its
    chunk texts, is one request, and a window is sent again with every group of chunks that needs it."""

    def embed_late_chunks(self, windows: Sequence[Sequence[str]], chunks: Sequence[Sequence[tuple[int, int, int]]],
                          kind: Kind = "document") -> np.ndarray:
        for window in windows:
            self.items[(kind, tuple(window))] = None
            self.inputs += 1
            self.requests += 1
            self.tokens += sum(self.api.fit(list(window))[1])
        return self._stand_ins([repr(chunk) for chunk in chunks])


class TokenIdRecorder(Recorder, TokenIdWrapper):
    """A :class:`Recorder` of a model fed token ids (``st:``): records id sequences, and for late
    chunking the windows the model would read."""

    def tokens_read(self, texts: Sequence[str], kind: Kind) -> list[int]:
        """The content tokens the model reads of each text: its tokens (special tokens and prompt
        left out) up to what one input holds (``id_capacity(kind)``), as ``encode`` truncates it;
        for a model whose prompt does not tokenise apart from the text, :meth:`Recorder.tokens_read`."""
        try:
            capacity = self.inner.id_capacity(kind)
        except InputError:
            return super().tokens_read(texts, kind)
        return [min(len(ids), capacity) for ids, _ in self.inner.token_ids(texts, capacity)]

    def embed_ids(self, ids: Sequence[Sequence[int]], kind: Kind = "document") -> np.ndarray:
        check_texts([], kind)
        sequences = [tuple(int(i) for i in seq) for seq in ids]
        return self._record(sequences, kind, [len(seq) for seq in sequences])

    def embed_late_chunks(self, windows: Sequence, chunks: Sequence[Sequence[tuple[int, int, int]]],
                          kind: Kind = "document") -> np.ndarray:
        check_texts([], kind)
        sequences = [tuple(int(i) for i in window) for window in windows]
        self._record(sequences, kind, [len(seq) for seq in sequences])
        return self._stand_ins([repr(chunk) for chunk in chunks])

    def embed_stretched(self, ids: Sequence[Sequence[int]], stretch, kind: Kind = "document") -> np.ndarray:
        check_texts([], kind)
        items = [StretchedIds(stretch, tuple(int(i) for i in seq)) for seq in ids]
        return self._record(items, kind, [len(item.ids) for item in items])


def recording(model) -> Recorder:
    """``model`` wrapped in the recorder that fits it."""
    if callable(getattr(model, "embed_ids", None)):
        return TokenIdRecorder(model)
    return APILateRecorder(model) if callable(getattr(model, "embed_late_chunks", None)) else Recorder(model)
