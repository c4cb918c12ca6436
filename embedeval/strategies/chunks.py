"""``chunks-max@C``: consecutive chunks the model reads as inputs of ``C`` tokens (counted as
``max_tokens`` counts them, special tokens and prompt included, so ``C`` <= ``max_tokens`` and
``chunks-max@256`` fills all-MiniLM-L6-v2's 256-token window: chunks of ``C - (max_tokens - W)``
content tokens); score = max over chunks of cos(q, chunk) — what a RAG retriever does. The scores
keep which chunk won. A retriever stores ``ceil(length / (C - frame))`` vectors per document of
``length`` content tokens (``frame``: the model's special tokens and prompt)."""

from __future__ import annotations

import math

from embedeval.errors import ConfigError
from embedeval.strategies.base import Family, Strategy, chunking_names, register, whole_number
from embedeval.strategies.parameters import Parameter
from embedeval.strategies.reader import Pieces, Reader

CHUNKS_MAX = "chunks-max"
#: ``strategy`` labels of chunks-max: ``chunks-max@128``.
CHUNKED_PREFIX = CHUNKS_MAX + "@"


def chunk_size(label) -> int | None:
    """The ``C`` of a ``chunks-max@C`` label; None for any other label."""
    label = str(label)
    size = label.removeprefix(CHUNKED_PREFIX)
    return int(size) if label.startswith(CHUNKED_PREFIX) and whole_number(size) else None


#: The chunk size ``C`` of ``name@C``: written in the label, else one strategy per ``--chunk-tokens`` size.
CHUNK_SIZE = Parameter("chunk_tokens", "the chunk size in tokens", minimum=1, setting="chunk_tokens", mark="@", symbol="C",
                       example=128, what="a chunk size", unit="tokens")


class ChunkFamily(Family):
    """A family scored by its best chunk, one strategy per chunk size: ``name@C``."""

    parameters = (CHUNK_SIZE,)
    scores_chunks = True

    def content_tokens(self, size: int, frame_tokens: int) -> int:
        """The content tokens of a ``size``-token chunk: ``size`` itself, a chunk size counting
        content tokens only (``late-chunking@C``)."""
        return size

    def vectors_per_document(self, label: str, length: int, frame_tokens: int = 0) -> int:
        """``ceil(length / c)``, ``c`` the content tokens of a chunk (:meth:`content_tokens`): a
        vector per chunk, 9 for ``chunks-max@128`` of all-MiniLM-L6-v2 (126 content tokens a chunk,
        ``frame_tokens`` 2: [CLS] and [SEP]) reading a 1,024-token document, 8 for ``late-chunking@128``."""
        size = label.rpartition("@")[2]
        if not whole_number(size) or int(size) < 1:
            raise ValueError(f"strategy {label!r} names no chunk size ({', '.join(n + '@C' for n in chunking_names())})")
        content = self.content_tokens(int(size), int(frame_tokens))
        if content < 1:
            raise ValueError(f"strategy {label!r} leaves no content tokens to a chunk beside {frame_tokens} special tokens")
        return math.ceil(int(length) / content)


@register
class ChunksMax(ChunkFamily):
    names = (CHUNKS_MAX,)
    choices = {CHUNKS_MAX: "best chunk of --chunk-tokens (chunks-max@C: of C tokens), as a RAG retriever"}
    hint = "one chunk size as chunks-max@C"
    glossary = "`chunks-max@C` the best of C-token chunks (a RAG retriever)"
    settings_help = {"chunk_tokens": "chunks-max, in model input tokens (special tokens included, at most the model's max_tokens)"}

    def move_words(self, label: str) -> str:
        return f"taking the best of its {label.removeprefix(CHUNKED_PREFIX)}-token chunks (`{label}`)"

    def prepare(self, strategy: Strategy, reader: Reader) -> None:
        """Chunks must hold content and fit the model's input (its special tokens counted)."""
        largest = reader.max_tokens if reader.reads_ids else reader.capacity
        if not reader.frame_tokens < strategy.chunk_tokens <= largest:
            raise ConfigError(f"chunks of {strategy.chunk_tokens} tokens do not fit {reader.name}, which reads "
                              f"{largest} tokens per input ({reader.frame_tokens} of them special); "
                              f"use `chunk_tokens` between {reader.frame_tokens + 1} and {largest}", "chunk_tokens")

    def content_tokens(self, size: int, frame_tokens: int) -> int:
        """``size - frame_tokens``: ``C`` counts the model's special tokens and prompt, as its
        ``max_tokens`` does (126 content tokens for ``chunks-max@128`` of all-MiniLM-L6-v2)."""
        return size - frame_tokens

    def cut(self, strategy: Strategy, reader: Reader, texts: list[str]) -> Pieces:
        size = self.content_tokens(strategy.chunk_tokens, reader.frame_tokens)
        return reader.cut_consecutive(texts, size, size, limit=None)
