"""A book's sentences and their token counts, computed once per content and kept in the cache.

Splitting is the slow part of building haystacks (syntok reads about 0.75 MB/s on the 2-core
project machine: 8 s for the ten shared Gutenberg books, every run, every command). So each book's
sentences and their reference-token counts are stored in ``<cache>/sentences/`` as one Arrow file
per book, keyed by

    blake2b(book text) + the sentence splitter (:data:`~embedeval.text.SENTENCE_SPLITTER`) +
    the tokenizer's fingerprint (:attr:`~embedeval.embedders.tokens.TokenCounter.fingerprint`),

so a second build of the same corpus, by any command, reads them back instead of splitting, and a
changed book, splitter or tokenizer is split again. Nothing is filtered here: which sentences a
haystack may use (characters, length) is the caller's choice.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from embedeval.embedders.tokens import TokenCounter
from embedeval.errors import OutputError
from embedeval.io import atomic_path
from embedeval.paths import default_cache_dir
from embedeval.text import SENTENCE_SPLITTER, split_sentences

#: The cache's sub-folder that holds split books.
SENTENCES_FOLDER = "sentences"


def sentence_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """``<cache_dir>/sentences`` (default: the user cache, ``$EMBEDEVAL_CACHE``)."""
    return (Path(cache_dir) if cache_dir else default_cache_dir()) / SENTENCES_FOLDER


def book_key(text: str, tokenizer: TokenCounter) -> str:
    """blake2b of the text, the splitter and the tokenizer's fingerprint (hex, 32 characters)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (SENTENCE_SPLITTER, tokenizer.fingerprint, text):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


#: Characters of books to split from which the split runs in worker processes, one book each
#: (syntok reads about 0.75 MB/s on one core; starting the workers costs about a second).
PARALLEL_SPLIT_CHARS = 2_000_000


def book_sentences(text: str, tokenizer: TokenCounter, cache_dir: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """The sentences of ``text`` (:func:`~embedeval.text.split_sentences`) and their token counts
    (``tokenizer.count``), from the cache when this text was split before with the same splitter
    and tokenizer, else computed and stored (atomically: a killed run leaves no half file)."""
    return books_sentences([text], tokenizer, cache_dir)[0]


def books_sentences(texts: list[str], tokenizer: TokenCounter, cache_dir: str | Path | None = None,
                    ) -> list[tuple[list[str], np.ndarray]]:
    """:func:`book_sentences` of each of ``texts``: the books not in the cache are split in worker
    processes, one book each, over the CPU's cores when there are several and they hold at least
    :data:`PARALLEL_SPLIT_CHARS` characters (the split is the same either way), then counted here
    in one batch per book and stored."""
    paths = [sentence_cache_dir(cache_dir) / f"{book_key(text, tokenizer)}.arrow" for text in texts]
    found: dict[int, tuple[list[str], np.ndarray]] = {}
    for i, path in enumerate(paths):
        try:
            table = feather.read_table(path)
            found[i] = table.column("sentence").to_pylist(), table.column("tokens").to_numpy().astype(np.int64)
        except (OSError, KeyError, pa.ArrowException):  # not split yet, or a damaged file: split again
            pass
    missing = [i for i in range(len(texts)) if i not in found]
    jobs = min(len(missing), os.cpu_count() or 1) if sum(len(texts[i]) for i in missing) >= PARALLEL_SPLIT_CHARS else 1
    if jobs > 1:
        from joblib import Parallel, delayed

        splits = Parallel(n_jobs=jobs)(delayed(split_sentences)(texts[i]) for i in missing)
    else:
        splits = [split_sentences(texts[i]) for i in missing]
    for i, sentences in zip(missing, splits, strict=True):
        counts = np.asarray(tokenizer.count(sentences), dtype=np.int64)
        try:
            with atomic_path(paths[i]) as tmp:
                feather.write_feather(pa.table({"sentence": pa.array(sentences, pa.large_string()),
                                                "tokens": pa.array(counts, pa.int32())}), str(tmp))
        except OutputError:  # a cache that cannot be written only costs the next run the split
            pass
        found[i] = sentences, counts
    return [found[i] for i in range(len(texts))]


def book_token_counts(books, tokenizer: TokenCounter, cache_dir: str | Path | None = None) -> np.ndarray:
    """Each book's length in ``tokenizer``'s tokens (for a corpus of the user's, its documents'): the
    sum of its sentences' counts (:func:`book_sentences`, read from the cache where the haystacks
    were built from the same books)."""
    return np.array([int(counts.sum()) for _, counts in books_sentences([book.text for book in books], tokenizer, cache_dir)],
                    dtype=np.int64)
