"""A model stand-in for plans: it records what a run would send to the model, and sends nothing.

:func:`recording` wraps a model so that a run's embedding steps can go through the very code a real
run takes (strategies, the cache's look-ups, de-duplication, the cache's chunks of
``commit_every`` texts), while every miss is written down instead of embedded. Its vectors are
stand-ins (a unit vector drawn from a hash of the input), never stored: the cache wrapper around a
recorder is read-only (:class:`~embedeval.embedders.cached.CachedEmbedder` with ``read_only``).

What is recorded, per model call as a real run would make it:

- ``items``: each distinct model input once, as a request of that one input (the request's
  ``units``: a text, a token-id sequence, a window read in one pass), in the order the run first
  asks for them; ``inputs``: the inputs the model is given, one read again in another call
  counted again;
- ``tokens``: for an API model, the tokens of the inputs as they would be sent and ``requests``,
  the requests that takes (:meth:`~embedeval.embedders.api.APIEmbedder.sends`); for a local
  model the content tokens it would read (the request's ``tokens``): a text's tokens up to the
  window, special tokens and prompt left out (:meth:`TokenIdRecorder.tokens_read`; an expanded
  query longer than the window counts the window, not its whole length).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from embedeval.embedders.api import APIEmbedder
from embedeval.embedders.base import EmbedderWrapper, Kind, TokenIdWrapper, l2_normalize
from embedeval.embedders.requests import Request, TokenIds
from embedeval.errors import InputError

#: The vector size of a recorder whose model's size is not known before its first answer.
STAND_IN_DIM = 8


def stand_in_vectors(items: Sequence[bytes], dim: int) -> np.ndarray:
    """A unit vector per item (the bytes a request gives for each of its vectors, its
    ``stand_in_bytes``) drawn from the sha256 of the item, drawn out to ``dim`` bytes by SHAKE-256:
    distinct inputs get distinct directions, so nothing downstream sees ties it would not see in a
    real run. Hashes, not a random generator per item: thousands of haystacks a model stand in for
    cost milliseconds."""
    drawn = b"".join(hashlib.shake_256(hashlib.sha256(item).digest()).digest(dim) for item in items)
    vectors = np.frombuffer(drawn, dtype=np.uint8).reshape(len(items), dim).astype(np.float32) - 127.5  # never all zero
    return l2_normalize(vectors)


class Recorder(EmbedderWrapper):
    """Records the model calls a run would make (see the module docstring) and answers them with
    stand-in vectors. The cache in front of it passes on only what a run would send; for a model on
    a server of one's own the recorder names a fingerprint of its own (the real one needs the
    server's answer), so that cache finds nothing stored but still de-duplicates."""

    def __init__(self, inner):
        super().__init__(inner)
        self.items: dict[Request, None] = {}  # distinct inputs (requests of one input each), in first-asked order
        self.inputs = 0  # inputs the model is given, repeats across calls included (a window read for two calls' chunks)
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

    def embed_request(self, request: Request) -> np.ndarray:
        """Note one model call as the run would make it and answer every vector it asks for with
        its stand-in."""
        if len(request):
            units = request.units()
            self.inputs += len(units)
            self.items.update(dict.fromkeys(units))
            if self.api is not None:
                tokens, requests = self.api.sends(request)
                self.tokens += tokens
                self.requests += requests
            else:
                self.tokens += request.tokens(lambda texts: self.tokens_read(texts, request.kind))
        return stand_in_vectors(request.stand_in_bytes(), self.dim).astype(np.float32, copy=False)

    def tokens_read(self, texts: Sequence[str], kind: Kind) -> list[int]:
        """The tokens a local model reads of each text: its tokens, at most the model's window
        (``max_tokens``)."""
        return [min(n, self.inner.max_tokens) for n in self.inner.count_tokens(texts)]


class TokenIdRecorder(Recorder, TokenIdWrapper):
    """A :class:`Recorder` of a model fed token ids (``st:``), which counts the tokens of a text as
    the ids it reads."""

    def tokens_read(self, texts: Sequence[str], kind: Kind) -> list[int]:
        """The content tokens the model reads of each text: its tokens (special tokens and prompt
        left out) up to what one input holds (``id_capacity(kind)``), as ``encode`` truncates it;
        for a model whose prompt does not tokenise apart from the text, :meth:`Recorder.tokens_read`."""
        try:
            capacity = self.inner.id_capacity(kind)
        except InputError:
            return super().tokens_read(texts, kind)
        return [min(len(ids), capacity) for ids, _ in self.inner.token_ids(texts, capacity)]


def recording(model) -> Recorder:
    """``model`` wrapped in the recorder that fits it."""
    return TokenIdRecorder(model) if model.serves(TokenIds) else Recorder(model)
