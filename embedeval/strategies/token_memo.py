"""The token ids and character offsets of the texts one model last read, kept for all its
strategies (:class:`TokenMemo`): a text is tokenised once however many strategies read it."""

from __future__ import annotations

import hashlib

import numpy as np

#: Texts tokenised at a time when cutting pieces (token offsets of 8k-token texts add up).
TOKENIZE_BATCH = 256


class TokenMemo:
    """The token ids and character offsets (int32 arrays) of the last texts one model read, shared
    by its strategies: tokenising thousands of 8k-token haystacks costs about a minute, once.

    ``encode(texts, tokenize, limit)`` returns per text ``(ids, offsets)``, at least the first
    ``limit`` tokens (all with ``limit=None``); a stored encoding of the same texts by the same
    tokenizer that reaches as far serves again (so windows and chunks after a full tokenisation,
    and truncation after either, cost nothing more). ``tokenize`` is the model's ``token_ids``
    (or the reference ``ids``).
    """

    def __init__(self):
        self._key: tuple | None = None
        self._limit: int | None = None
        self._encoded: list[tuple[np.ndarray, np.ndarray]] = []

    def encode(self, texts: list[str], tokenize, limit: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
        digest = hashlib.blake2b(digest_size=16)
        for text in texts:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        key = (id(getattr(tokenize, "__self__", tokenize)), len(texts), digest.digest())  # which tokenizer, which texts
        if key == self._key and (self._limit is None or (limit is not None and limit <= self._limit)):
            return self._encoded
        encoded = []
        for first in range(0, len(texts), TOKENIZE_BATCH):  # the tokenizer's Python offsets are large: a batch at a time
            for ids, offsets in tokenize(texts[first : first + TOKENIZE_BATCH], limit):
                encoded.append((np.asarray(ids, dtype=np.int32), np.asarray(offsets, dtype=np.int32).reshape(-1, 2)))
        self._key, self._limit, self._encoded = key, limit, encoded
        return encoded
