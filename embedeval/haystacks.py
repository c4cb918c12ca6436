"""Deterministic NoLiMa-style haystacks (DESIGN §3).

Paired design: for each (group, length) one *filler* is drawn. Every depth and variant inserts its
needle into that same filler, trimmed at its end so the total is ``length`` tokens; the control is
the filler alone, trimmed to ``length``. Within a condition only the needle and its place change.

Two ways to draw a filler (``filler=``):

``random``      random sentence-aligned snippets (< 250 tokens each) from random books;
``sequential``  one contiguous passage in book order (as Context Rot and NoLiMa do): a start
                sentence drawn with the seed, then consecutive sentences, on into the next book
                when one ends (after the last book, the first).

Every book is split and tokenised once (:class:`SentencePool`); sentences naming any character
of the needle set, or of 250 tokens or more, are left out, so controls never mention a character
(a sequential passage steps over them).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from embedeval.corpus import Corpus, check_min_books, require_books
from embedeval.errors import ConfigError, CorpusError
from embedeval.defaults import (
    DEFAULT_DEPTHS, DEFAULT_FILLER, DEFAULT_LENGTHS, DEFAULT_MIN_BOOKS, DEFAULT_NEGATIVES, DEFAULT_SEED, DEFAULT_VARIANTS,
)
from embedeval.labels import CONTROL, NEGATIVE
from embedeval.needles import NEEDLE_VARIANTS, NeedleGroup, NeedleSet
from embedeval.text import split_sentences
from embedeval.tokens import TokenCounter, load_token_counter

MAX_SNIPPET_TOKENS = 250  # snippets are strictly shorter
MIN_SNIPPET_TOKENS = 40
FILLERS = ("random", "sequential")
HAYSTACK_COLUMNS = [
    "id", "group_id", "category", "variant", "length", "n_tokens", "depth", "target_depth",
    "text", "needle_start", "needle_end", "character", "sources", "seed",
]

@dataclass
class SentencePool:
    """All usable sentences of a corpus with their token counts, per book."""

    book_ids: list[str]
    sentences: list[list[str]]
    tokens: list[np.ndarray]

    @classmethod
    def from_corpus(cls, corpus: Corpus, tokenizer: TokenCounter, banned: re.Pattern | None = None) -> SentencePool:
        """Split and tokenise every book once; drop sentences of >= 250 tokens or matching ``banned``
        (the needle set's :meth:`~embedeval.needles.NeedleSet.character_pattern`)."""
        book_ids, sentences, tokens = [], [], []
        for book in corpus.books:
            candidates = [s for s in split_sentences(book.text) if not (banned and banned.search(s))]
            counts = np.asarray(tokenizer.count(candidates), dtype=np.int64)
            keep = (counts > 0) & (counts < MAX_SNIPPET_TOKENS)
            if keep.any():
                book_ids.append(book.id)
                sentences.append([s for s, k in zip(candidates, keep) if k])
                tokens.append(counts[keep])
        return cls(book_ids, sentences, tokens)

    @property
    def total_tokens(self) -> int:
        return int(sum(t.sum() for t in self.tokens))


@dataclass
class Piece:
    text: str
    n_tokens: int
    book: str


def condition_rng(seed: int, group_id: str, length: int) -> np.random.Generator:
    """The random stream of one (group, length) condition: independent of the others."""
    return np.random.default_rng([seed, zlib.crc32(group_id.encode("utf-8")), length])


def draw_character(group: NeedleGroup, seed: int, placement: str) -> str:
    """The character of one needle placement (group, length, depth): drawn from the group's
    ``character_set`` with a stream of its own (seed, placement), as NoLiMa draws one per
    placement; the variants of one placement share it, so they stay comparable. The group's one
    character when it has no set."""
    names = group.characters
    if len(names) == 1:
        return names[0]
    rng = np.random.default_rng([seed, zlib.crc32(placement.encode("utf-8"))])
    return names[int(rng.integers(len(names)))]


def draw_filler(pool: SentencePool, n_tokens: int, rng: np.random.Generator) -> list[Piece]:
    """Random snippets (consecutive sentences of one random book, < 250 tokens) until ``n_tokens``."""
    pieces: list[Piece] = []
    total = 0
    while total < n_tokens:
        b = int(rng.integers(len(pool.book_ids)))
        sentences, counts = pool.sentences[b], pool.tokens[b]
        i = int(rng.integers(len(sentences)))
        budget = int(rng.integers(MIN_SNIPPET_TOKENS, MAX_SNIPPET_TOKENS))
        used = 0
        while i < len(sentences) and (used == 0 or used + counts[i] < budget):
            pieces.append(Piece(sentences[i], int(counts[i]), pool.book_ids[b]))
            used += int(counts[i])
            i += 1
        total += used
    return pieces


def draw_sequential(pool: SentencePool, n_tokens: int, rng: np.random.Generator) -> list[Piece]:
    """One contiguous passage of at least ``n_tokens``: from a start sentence drawn uniformly over
    the whole pool, consecutive sentences in book order, on into the next book when one ends
    (after the last book, the first)."""
    sizes = np.array([len(s) for s in pool.sentences])
    start = int(rng.integers(int(sizes.sum())))
    b = int(np.searchsorted(np.cumsum(sizes), start, side="right"))
    i = start - int(sizes[:b].sum())
    pieces: list[Piece] = []
    total = 0
    while total < n_tokens:
        if i == sizes[b]:
            b, i = (b + 1) % len(sizes), 0
            continue
        pieces.append(Piece(pool.sentences[b][i], int(pool.tokens[b][i]), pool.book_ids[b]))
        total += int(pool.tokens[b][i])
        i += 1
    return pieces


def fill(pool: SentencePool, n_tokens: int, rng: np.random.Generator, filler: str = DEFAULT_FILLER) -> list[Piece]:
    """A filler of at least ``n_tokens`` drawn the ``filler`` way (one of :data:`FILLERS`)."""
    return draw_sequential(pool, n_tokens, rng) if filler == "sequential" else draw_filler(pool, n_tokens, rng)


def trim(pieces: list[Piece], n_tokens: int, tokenizer: TokenCounter) -> list[Piece]:
    """The first ``n_tokens`` tokens of the filler: whole sentences, then a cut last one."""
    out, total = [], 0
    for piece in pieces:
        if total + piece.n_tokens <= n_tokens:
            out.append(piece)
            total += piece.n_tokens
            continue
        head = tokenizer.prefix(piece.text, n_tokens - total)
        if head:
            out.append(Piece(head, tokenizer.count([head])[0], piece.book))
        break
    return out


def insert_needle(pieces: list[Piece], needle: str, target_depth: float) -> tuple[str, int, int, int]:
    """Put ``needle`` at the sentence boundary nearest ``target_depth`` of the filler's tokens.

    Returns (text, needle_start, needle_end, tokens before the needle).
    """
    boundaries = np.concatenate([[0], np.cumsum([p.n_tokens for p in pieces])])
    k = int(np.argmin(np.abs(boundaries - target_depth * boundaries[-1])))
    before = " ".join(p.text for p in pieces[:k])
    after = " ".join(p.text for p in pieces[k:])
    start = len(before) + (1 if before else 0)
    text = " ".join(part for part in (before, needle, after) if part)
    return text, start, start + len(needle), int(boundaries[k])


def check_build_args(lengths: Sequence[int], depths: int, variants: Sequence[str], negatives: int = DEFAULT_NEGATIVES,
                     min_books: int = DEFAULT_MIN_BOOKS, filler: str = DEFAULT_FILLER) -> None:
    """Reject bad grids before any work: lengths must be positive ints, depths >= 1, known
    variants, at least one negative per length, min_books >= 1, a known filler."""
    if not lengths:
        raise ConfigError("no haystack lengths given")
    for length in lengths:
        if not isinstance(length, (int, np.integer)) or length < 16:
            raise ConfigError(f"haystack length {length!r} is invalid: lengths are whole numbers of tokens >= 16")
    repeated = sorted({length for length in lengths if list(lengths).count(length) > 1})
    if repeated:
        raise ConfigError(f"haystack length {repeated[0]} is given more than once")
    if depths < 1:
        raise ConfigError(f"depths must be >= 1, not {depths}")
    if not isinstance(negatives, (int, np.integer)) or negatives < 1:
        raise ConfigError(f"negatives must be a whole number >= 1, not {negatives!r}: each needle haystack is ranked among them")
    unknown = [v for v in variants if v not in NEEDLE_VARIANTS]
    if unknown:
        raise ConfigError(f"unknown variant {unknown[0]!r}; known: {', '.join(NEEDLE_VARIANTS)}")
    if len(set(variants)) < len(variants):
        raise ConfigError(f"a variant is given more than once: {', '.join(variants)}")
    check_min_books(min_books)
    if filler not in FILLERS:
        raise ConfigError(f"unknown filler {filler!r}; use one of {', '.join(FILLERS)}")


def depth_grid(n_depths: int) -> np.ndarray:
    """``n_depths`` target depths spread evenly from 0 (start) to 1 (end)."""
    return np.linspace(0.0, 1.0, n_depths) if n_depths > 1 else np.array([0.5])


def build_haystacks(
    needle_set: NeedleSet,
    corpus: Corpus,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    depths: int = DEFAULT_DEPTHS,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    controls: bool = True,
    tokenizer: TokenCounter | None = None,
    seed: int = DEFAULT_SEED,
    min_books: int = DEFAULT_MIN_BOOKS,
    progress: bool = False,
    pool: SentencePool | None = None,
    negatives: int = DEFAULT_NEGATIVES,
    filler: str = DEFAULT_FILLER,
) -> pd.DataFrame:
    """Every haystack of the grid as a DataFrame with the columns of :data:`HAYSTACK_COLUMNS`.

    Same inputs and seed -> identical rows. ``depth`` is the needle's token offset / n_tokens.
    Besides the needle haystacks and the per-condition controls, every length gets ``negatives``
    needle-free haystacks built like the controls (variant ``negative``, no group): with the
    controls they are the pool each needle haystack is ranked in. ``filler`` is how fillers are
    drawn (see the module docstring); the corpus must hold at least ``min_books`` books either way
    (a single haystack need not span them).
    """
    check_build_args(lengths, depths, variants, negatives, min_books, filler)
    needle_set.check_variants(variants)
    tokenizer = tokenizer or load_token_counter()
    require_books(corpus, min_books)
    pool = pool or SentencePool.from_corpus(corpus, tokenizer, banned=needle_set.character_pattern())
    need = max(lengths) + MAX_SNIPPET_TOKENS
    if pool.total_tokens < need:
        raise CorpusError(
            f"corpus {corpus.source} is too small: {pool.total_tokens} usable tokens, "
            f"haystacks of {max(lengths)} tokens need at least {need}"
        )
    needles = [(g, v, name) for g in needle_set.groups for v in variants for name in g.characters]
    counts = tokenizer.count([g.needle(v, name) for g, v, name in needles])
    needle_tokens = {(g.id, v, name): n for (g, v, name), n in zip(needles, counts)}
    rows = []
    conditions = [(g, length) for g in needle_set.groups for length in lengths]
    for group, length in tqdm(conditions, desc="building haystacks", unit="condition", disable=not progress):
        pieces = fill(pool, length + MAX_SNIPPET_TOKENS, condition_rng(seed, group.id, length), filler)
        rows += _condition_rows(group, length, pieces, variants, depth_grid(depths), controls, needle_tokens, tokenizer, seed)
    for length in tqdm(lengths, desc="building negatives", unit="length", disable=not progress):
        base = {"group_id": "", "category": "", "length": length, "seed": seed}
        pool_rows = []
        for k in range(negatives):
            pieces = fill(pool, length + MAX_SNIPPET_TOKENS, condition_rng(seed, f"{NEGATIVE}-{k}", length), filler)
            pool_rows += _needle_free_row(base, f"{NEGATIVE}:{length}:{k:03d}", NEGATIVE, trim(pieces, length, tokenizer))
        rows += _counted(pool_rows, length, tokenizer)
    return pd.DataFrame(rows, columns=HAYSTACK_COLUMNS).astype(
        {"needle_start": "Int64", "needle_end": "Int64", "depth": "Float64", "target_depth": "Float64"}
    )


def _condition_rows(group, length, filler, variants, targets, controls, needle_tokens, tokenizer, seed) -> list[dict]:
    base = {"group_id": group.id, "category": group.category, "length": length, "seed": seed}
    rows = []
    for variant in variants:
        for index, target in enumerate(targets):
            haystack_id = f"{group.id}:{variant}:{length}:d{index:02d}"
            character = draw_character(group, seed, f"{group.id}:{length}:d{index:02d}")
            pieces = trim(filler, length - needle_tokens[(group.id, variant, character)], tokenizer)
            text, start, end, tokens_before = insert_needle(pieces, group.needle(variant, character), float(target))
            rows.append({**base, "id": haystack_id, "variant": variant, "target_depth": float(target), "text": text,
                         "needle_start": start, "needle_end": end, "character": character,
                         "tokens_before": tokens_before, "sources": sorted({p.book for p in pieces})})
    if controls:
        rows += _needle_free_row(base, f"{group.id}:{CONTROL}:{length}", CONTROL, trim(filler, length, tokenizer))
    return _counted(rows, length, tokenizer)


def _needle_free_row(base: dict, haystack_id: str, variant: str, pieces: list[Piece]) -> list[dict]:
    """A haystack of filler alone (a control or a negative), as a one-row list."""
    return [{**base, "id": haystack_id, "variant": variant, "target_depth": None, "text": " ".join(p.text for p in pieces),
             "needle_start": None, "needle_end": None, "character": None, "tokens_before": None,
             "sources": sorted({p.book for p in pieces})}]


def _counted(rows: list[dict], length: int, tokenizer: TokenCounter) -> list[dict]:
    """``rows`` with ``n_tokens`` and ``depth`` (needle's token offset / n_tokens) filled in."""
    for row, n in zip(rows, tokenizer.count([r["text"] for r in rows])):
        if n > length:
            raise CorpusError(f"haystack {row['id']} came out at {n} tokens, over its target {length}")
        row["n_tokens"] = n
        before = row.pop("tokens_before")
        row["depth"] = None if before is None else before / n
    return rows
