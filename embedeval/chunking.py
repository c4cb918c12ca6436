"""Split a corpus into retrieval chunks.

Chunker specs: ``sentences:N`` (N consecutive sentences), ``sentences:A-B`` (A..B sentences,
sizes drawn with a seed), ``tokens:N`` (windows of at most N reference tokens, never cut inside a word).

:func:`corpus_chunks` is the one way every command cuts a corpus (``themes``, the similarity
commands, ``export``): the chunks of a corpus, chunker and seed are kept in ``<cache>/chunks/``,
so a second command on the same corpus and settings reads the same chunks back (and finds their
vectors in the embedding cache) instead of cutting and embedding the corpus again.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from embedeval.corpus import Corpus
from embedeval.defaults import DEFAULT_CHUNKER, DEFAULT_SEED
from embedeval.embedders.tokens import TokenCounter, load_token_counter
from embedeval.errors import ConfigError, OutputError
from embedeval.io import atomic_path
from embedeval.paths import default_cache_dir
from embedeval.text import SENTENCE_SPLITTER, split_sentences

#: The cache's sub-folder that holds cut corpora.
CHUNKS_FOLDER = "chunks"
#: Bumped when the way chunks are cut changes (the cache key includes it).
CHUNKS_FORMAT = 1

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


def chunks_key(corpus: Corpus, spec: str, seed: int, tokenizer: TokenCounter | None = None) -> str:
    """blake2b (hex, 32 characters) of what a corpus's chunks depend on: :data:`CHUNKS_FORMAT`, the
    chunker (as parsed), each book's id and text, and for ``sentences:`` the splitter and the seed
    (sizes are drawn with it), for ``tokens:`` the tokenizer's fingerprint. The corpus's name is
    not part of it: the same books under another name are the same chunks."""
    kind, low, high = parse_chunker(spec)
    parts = [str(CHUNKS_FORMAT), f"{kind}:{low}-{high}"]
    parts += [SENTENCE_SPLITTER, str(int(seed))] if kind == "sentences" else [tokenizer.fingerprint]
    digest = hashlib.blake2b(digest_size=16)
    for part in [*parts, *(field for book in corpus.books for field in (book.id, book.text))]:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def corpus_chunks(corpus: Corpus, spec: str = DEFAULT_CHUNKER, seed: int = DEFAULT_SEED, cache_dir: str | Path | None = None) -> list[Chunk]:
    """:func:`chunk_corpus`, kept in ``<cache_dir>/chunks/<key>.arrow`` (default: the user cache,
    ``$EMBEDEVAL_CACHE``; key: :func:`chunks_key`): read back when this corpus was cut with these
    settings before, by any command, else cut and stored (atomically; a cache that cannot be
    written only costs the next command the cut)."""
    kind, _, _ = parse_chunker(spec)
    tokenizer = load_token_counter() if kind == "tokens" else None
    path = (Path(cache_dir) if cache_dir else default_cache_dir()) / CHUNKS_FOLDER / f"{chunks_key(corpus, spec, seed, tokenizer)}.arrow"
    try:
        table = feather.read_table(path)
        return [Chunk(*row) for row in zip(*(table.column(c).to_pylist() for c in ("id", "book", "text")), strict=True)]
    except (OSError, KeyError, pa.ArrowException):  # not cut yet, or a damaged file: cut again
        pass
    chunks = chunk_corpus(corpus, spec, seed, tokenizer)
    try:
        with atomic_path(path) as tmp:
            feather.write_feather(pa.table({column: pa.array([getattr(c, column) for c in chunks], pa.large_string())
                                            for column in ("id", "book", "text")}), str(tmp))
    except OutputError:
        pass
    return chunks
