"""Split a corpus into retrieval chunks.

Chunker specs: ``sentences:N`` (N consecutive sentences), ``sentences:A-B`` (A..B sentences,
sizes drawn with a seed), ``tokens:N`` (windows of at most N reference tokens, never cut inside a word).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from embedeval.corpus import Corpus
from embedeval.defaults import DEFAULT_CHUNKER, DEFAULT_SEED
from embedeval.errors import ConfigError
from embedeval.text import split_sentences
from embedeval.embedders.tokens import TokenCounter, load_token_counter

_SPEC = re.compile(r"^(sentences):(\d+)(?:-(\d+))?$|^(tokens):(\d+)$")


@dataclass(frozen=True)
class Chunk:
    id: str
    book: str
    text: str


def parse_chunker(spec: str) -> tuple[str, int, int]:
    """``"sentences:1-3"`` -> ("sentences", 1, 3); ``"tokens:256"`` -> ("tokens", 256, 256)."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise ConfigError(f"unknown chunker {spec!r}; use sentences:N, sentences:A-B or tokens:N")
    if match.group(4):
        low = high = int(match.group(5))
    else:
        low = int(match.group(2))
        high = int(match.group(3) or low)
    if low < 1 or high < low:
        raise ConfigError(f"chunker {spec!r}: sizes must be >= 1 and A <= B")
    return match.group(1) or match.group(4), low, high


def chunk_corpus(corpus: Corpus, spec: str = DEFAULT_CHUNKER, seed: int = DEFAULT_SEED, tokenizer: TokenCounter | None = None) -> list[Chunk]:
    """Every book cut into consecutive chunks (nothing skipped, nothing overlapping)."""
    kind, low, high = parse_chunker(spec)
    rng = np.random.default_rng(seed)
    chunks: list[Chunk] = []
    for book in corpus.books:
        if kind == "sentences":
            sentences = split_sentences(book.text)
            start = 0
            while start < len(sentences):
                size = int(rng.integers(low, high + 1))
                chunks.append(Chunk(f"{book.id}:{len(chunks)}", book.id, " ".join(sentences[start : start + size])))
                start += size
        else:
            if tokenizer is None:
                tokenizer = load_token_counter()
            for piece in tokenizer.word_windows(" ".join(book.text.split()), low):
                chunks.append(Chunk(f"{book.id}:{len(chunks)}", book.id, piece))
    return chunks
