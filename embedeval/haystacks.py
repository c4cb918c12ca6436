"""Deterministic NoLiMa-style haystacks (docs/haystacks.md).

Paired design: for each (group, length) one *filler* is drawn. Every depth and variant inserts its
needle into that same filler, trimmed at its end so the total is ``length`` tokens; the control is
the filler alone, trimmed to ``length``. Within a condition only the needle and its place change.

Two ways to draw a filler (``filler=``):

``random``      random sentence-aligned snippets (< 250 tokens each) from random books;
``sequential``  one contiguous passage in book order (as Context Rot and NoLiMa do): a start
                sentence drawn with the seed, then consecutive sentences, on into the next book
                when one ends (after the last book, the first).

Distractors (the grid's distractor counts, a list of K values; 0 = none): for each K > 0 every needle
haystack gets the first K distractors of its group at sentence boundaries outside a +-0.2 depth
zone around its needle (NoLiMa's rule), chosen with a stream of its own; it then has a control of
its own: the same filler with the same distractors at the same boundaries and no needle, topped
up to the length (``control_id`` pairs the two). Each question's retrieval pool at K > 0 is the
``negatives`` fillers with that question's K distractors at random boundaries
(``distractors_of``), so a needle haystack is ranked among texts that hold its decoys too.

Where no boundary lies outside a needle's zone (short haystacks of long sentences), its
distractors go to the farthest boundaries inside it (``distractors_in_zone``), and a needle
haystack byte-identical to an earlier depth's of its condition is left out (counted once); one
stderr line each says how many.

Every book is split and tokenised once per content, kept in the cache (:mod:`embedeval.sentences`,
:class:`SentencePool`); sentences naming any character
of the needle set, or of 250 tokens or more, are left out, so controls never mention a character
(a sequential passage steps over them).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.corpus import Corpus, load_corpus, require_books
from embedeval.defaults import DEFAULT_FILLER
from embedeval.embedders.tokens import TokenCounter, load_token_counter
from embedeval.errors import ConfigError, CorpusError
from embedeval.grid import HaystackGrid
from embedeval.labels import CONTROL, NEGATIVE
from embedeval.messages import say
from embedeval.needles import NeedleGroup, NeedleSet
from embedeval.progress import bar
from embedeval.schema import HAYSTACK_COLUMNS, N_DISTRACTORS, N_NEEDLES
from embedeval.sentences import books_sentences

MAX_SNIPPET_TOKENS = 250  # snippets are strictly shorter
MIN_SNIPPET_TOKENS = 40
#: Distractors go at sentence boundaries whose depth differs from the needle's by more than this.
DISTRACTOR_ZONE = 0.2

@dataclass
class SentencePool:
    """All usable sentences of a corpus with their token counts, per book."""

    book_ids: list[str]
    sentences: list[list[str]]
    tokens: list[np.ndarray]

    @classmethod
    def from_corpus(cls, corpus: Corpus, tokenizer: TokenCounter, banned: re.Pattern | None = None,
                    cache_dir: str | Path | None = None) -> SentencePool:
        """Every book's sentences and token counts, split and counted once per content
        (:func:`~embedeval.sentences.books_sentences`: kept in ``<cache_dir>/sentences``); drop
        sentences of >= 250 tokens or matching ``banned`` (the needle set's
        :meth:`~embedeval.needles.NeedleSet.character_pattern`)."""
        book_ids, sentences, tokens = [], [], []
        for book, (split, counts) in zip(corpus.books, books_sentences([book.text for book in corpus.books], tokenizer, cache_dir), strict=True):
            keep = (counts > 0) & (counts < MAX_SNIPPET_TOKENS)
            if banned:
                keep &= np.fromiter((not banned.search(s) for s in split), dtype=bool, count=len(split))
            if keep.any():
                book_ids.append(book.id)
                sentences.append([s for s, k in zip(split, keep, strict=True) if k])
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


def placement_rng(seed: int, placement: str) -> np.random.Generator:
    """The random stream of one labelled placement (a needle's character, a haystack's
    distractors): independent of the others."""
    return np.random.default_rng([seed, zlib.crc32(placement.encode("utf-8"))])


def draw_character(group: NeedleGroup, seed: int, placement: str) -> str:
    """The character of one needle placement (group, length, depth): drawn from the group's
    ``character_set`` with a stream of its own (seed, placement), as NoLiMa draws one per
    placement; the variants of one placement share it, so they stay comparable. The group's one
    character when it has no set."""
    names = group.characters
    if len(names) == 1:
        return names[0]
    return names[int(placement_rng(seed, placement).integers(len(names)))]


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
    """A filler of at least ``n_tokens`` drawn the ``filler`` way (one of :data:`~embedeval.grid.FILLERS`)."""
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


def assemble(pieces: list[Piece], inserts: Sequence[tuple[int, str]]) -> tuple[str, list[int]]:
    """The filler's sentences joined by spaces, with each insert ``(k, text)`` put at boundary
    ``k`` (before piece k; ``len(pieces)`` is the end; inserts at one boundary keep their order).

    Returns the text and each insert's character offset in it.
    """
    by_boundary: dict[int, list[int]] = {}
    for index, (k, _) in enumerate(inserts):
        by_boundary.setdefault(k, []).append(index)
    parts: list[str] = []
    starts = [0] * len(inserts)
    offset = 0
    for k in range(len(pieces) + 1):
        for index in by_boundary.get(k, ()):
            parts.append(inserts[index][1])
            starts[index] = offset
            offset += len(inserts[index][1]) + 1
        if k < len(pieces):
            parts.append(pieces[k].text)
            offset += len(pieces[k].text) + 1
    return " ".join(parts), starts


def inserts_tokens_before(pieces: list[Piece], places: Sequence[int], tokens: Sequence[int]) -> list[int]:
    """Tokens before each insert of :func:`assemble` (insert i at boundary ``places[i]``, taking
    ``tokens[i]`` tokens): the filler's tokens before its boundary, plus the inserts at earlier
    boundaries and those before it at its own (inserts at one boundary keep their order)."""
    boundaries = boundary_tokens(pieces)
    return [int(boundaries[k]) + sum(n for j, (other, n) in enumerate(zip(places, tokens, strict=True)) if other < k or (other == k and j < i))
            for i, k in enumerate(places)]


def boundary_tokens(pieces: list[Piece]) -> np.ndarray:
    """Tokens before each sentence boundary of the filler: 0, then the running totals."""
    return np.concatenate([[0], np.cumsum([p.n_tokens for p in pieces])]).astype(np.int64)


def needle_boundary(pieces: list[Piece], target_depth: float) -> int:
    """The sentence boundary nearest ``target_depth`` of the filler's tokens."""
    boundaries = boundary_tokens(pieces)
    return int(np.argmin(np.abs(boundaries - target_depth * boundaries[-1])))


def distractor_boundaries(pieces: list[Piece], n: int, rng: np.random.Generator, needle_at: int | None = None,
                          length: int | None = None) -> tuple[list[int], int]:
    """``n`` sentence boundaries for distractors, ascending, drawn with ``rng``, and how many of
    them lie inside the needle's zone (0 unless no boundary is outside it).

    The boundaries drawn from are those before each sentence, never the end, so a control topped
    up with more filler has the distractors at the same places. With a needle at boundary
    ``needle_at`` of a haystack of ``length`` tokens, only those with ``|filler tokens before b -
    filler tokens before the needle| / length >`` :data:`DISTRACTOR_ZONE`: whatever else goes in
    between only adds tokens, and the haystack holds at most ``length``, so each distractor is
    more than 0.2 of the haystack's tokens away from the needle. When fewer than ``n`` boundaries
    qualify, some hold more than one distractor. When none does (a short haystack of long
    sentences), the end of the filler is taken if it lies outside the zone (in the control, the
    distractors then follow its copy of the last sentence, which the needle haystack may cut);
    failing that the zone cannot be kept: the distractors go to the boundaries farthest from the
    needle, and all ``n`` count as inside it.
    """
    if needle_at is None:
        return _draw(np.arange(max(len(pieces), 1)), n, rng), 0
    boundaries = boundary_tokens(pieces)
    candidates = np.arange(len(pieces) + 1)
    distance = np.abs(boundaries[candidates] - boundaries[needle_at]) / max(length or int(boundaries[-1]), 1)
    outside = (distance > DISTRACTOR_ZONE) & (candidates != needle_at)
    allowed = candidates[:-1][outside[:-1]]
    if not allowed.size and outside[-1]:
        allowed = candidates[-1:]
    if allowed.size:
        return _draw(allowed, n, rng), 0
    order = np.lexsort((candidates, -distance))  # the farthest first (the needle's own boundary, at distance 0, last)
    return sorted(int(candidates[order[i % len(order)]]) for i in range(n)), n


def _draw(allowed: np.ndarray, n: int, rng: np.random.Generator) -> list[int]:
    """``n`` of the ``allowed`` boundaries, ascending: distinct while there are enough, then the
    rest drawn again from them."""
    if allowed.size >= n:
        chosen = rng.choice(allowed, size=n, replace=False)
    else:
        chosen = np.concatenate([allowed, rng.choice(allowed, size=n - allowed.size)])
    return sorted(int(k) for k in chosen)


def distractor_columns(haystacks: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each haystack's distractor count, the group whose distractors it holds ("" for none) and
    its control's id (None for needle-free haystacks); 0, "" and None for tables built before
    distractors existed."""
    if N_DISTRACTORS not in haystacks.columns:
        return (np.zeros(len(haystacks), dtype=np.int64), np.full(len(haystacks), "", dtype=object),
                np.full(len(haystacks), None, dtype=object))
    return (haystacks[N_DISTRACTORS].to_numpy(dtype=np.int64), haystacks["distractors_of"].fillna("").to_numpy(dtype=object),
            haystacks["control_id"].to_numpy(dtype=object))


def depth_grid(n_depths: int) -> np.ndarray:
    """``n_depths`` target depths spread evenly from 0 (start) to 1 (end)."""
    return np.linspace(0.0, 1.0, n_depths) if n_depths > 1 else np.array([0.5])


#: Where a built frame keeps the lines its build said (``DataFrame.attrs``, which Parquet keeps).
BUILD_NOTES = "build_notes"


def build_haystacks(
    needle_set: NeedleSet,
    grid: HaystackGrid | None = None,
    corpus: Corpus | None = None,
    *,
    tokenizer: TokenCounter | None = None,
    progress: bool = False,
    pool: SentencePool | None = None,
    cache_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Every haystack of ``grid`` (:class:`HaystackGrid`, default: the default grid) as a
    DataFrame with the columns of :data:`~embedeval.schema.HAYSTACK_COLUMNS`, from ``corpus`` (default: the grid's
    corpus, loaded) split into ``pool`` (default: from the corpus, cached in ``cache_dir``).

    Same inputs and seed -> identical rows. ``depth`` is the needle's token offset / n_tokens.
    Besides the needle haystacks and their controls, every length gets ``negatives``
    needle-free haystacks built like the controls (variant ``negative``, no group): with the
    controls they are the pool each needle haystack is ranked in. ``filler`` is how fillers are
    drawn (see the module docstring); the corpus must hold at least ``min_books`` books either way
    (a single haystack need not span them). Each K of the distractor counts builds the grid with K
    distractors (see the module docstring; K = 0 is the grid without them, its rows and ids as
    they always were); every group must have K distinct distractors, and every length must hold a
    group's needle and its K distractors. Where no sentence boundary lies outside a needle's
    zone, its distractors go inside it (``distractors_in_zone``); a needle haystack
    byte-identical to an earlier depth's is left out (counted once). Each is said once, with
    counts, on stderr. Books are split once per content into ``cache_dir``
    (:mod:`embedeval.sentences`). Each K > 1 of ``needles_per_haystack`` builds the needle
    haystacks again with K - 1 needles of other groups beside the own one (``n_needles``,
    ``needle_groups``, ``needle_characters``, ``needle_starts`` and ``needle_depths``, own
    first; without distractors); each has a control of its own holding the K - 1 other needles
    at the same boundaries (``n_needles`` K, its needle columns naming those K - 1), so the
    pool of needle-free candidates never holds it.
    """
    grid = grid or HaystackGrid()
    needle_set.check_variants(grid.variants)
    needle_set.check_distractors(grid.distractor_counts)
    tokenizer = tokenizer or load_token_counter()
    corpus = corpus or load_corpus(grid.corpus, progress=progress)  # a first download says so
    require_books(corpus, grid.min_books)
    needles = [(g, v, name) for g in needle_set.groups for v in grid.variants for name in g.characters]
    counts = tokenizer.count([g.needle(v, name) for g, v, name in needles])
    needle_tokens = {(g.id, v, name): n for (g, v, name), n in zip(needles, counts, strict=True)}
    decoys = sorted({text for g in needle_set.groups for text in g.distractor_texts[:max(grid.distractor_counts)]})
    decoy_tokens = dict(zip(decoys, tokenizer.count(decoys), strict=True))
    builder = _Builder(grid, depth_grid(grid.depths), needle_tokens, decoy_tokens, tokenizer, needle_set.groups)
    builder.check_room(needle_set.groups, grid.lengths)
    pool = pool or SentencePool.from_corpus(corpus, tokenizer, banned=needle_set.character_pattern(), cache_dir=cache_dir)
    need = max(grid.lengths) + MAX_SNIPPET_TOKENS
    if pool.total_tokens < need:
        raise CorpusError(
            f"corpus {corpus.source} is too small: {pool.total_tokens} usable tokens, "
            f"haystacks of {max(grid.lengths)} tokens need at least {need}"
        )
    rows = []
    conditions = [(g, length) for g in needle_set.groups for length in grid.lengths]
    for group, length in bar(conditions, desc="building haystacks", unit="condition", enabled=progress):
        pieces = fill(pool, length + MAX_SNIPPET_TOKENS, condition_rng(grid.seed, group.id, length), grid.filler)
        rows += builder.condition_rows(group, length, pieces)
    for length in bar(grid.lengths, desc="building negatives", unit="length", enabled=progress):
        for k in range(grid.negatives):
            pieces = fill(pool, length + MAX_SNIPPET_TOKENS, condition_rng(grid.seed, f"{NEGATIVE}-{k}", length), grid.filler)
            rows += builder.negative_rows(needle_set.groups, length, k, pieces)
    notes = builder.what_moved()
    for line in notes:
        say(line)
    frame = pd.DataFrame(rows, columns=HAYSTACK_COLUMNS).astype(
        {"needle_start": "Int64", "needle_end": "Int64", "depth": "Float64", "target_depth": "Float64"}
    )
    frame.attrs[BUILD_NOTES] = notes  # said again where a stored build is read back (embedeval.haystack_store)
    return frame


@dataclass
class _Builder:
    """What every condition of one build shares: the grid, its target depths and the token
    counts of needles and distractors; and what the build met (merged depths, distractors in a
    needle's zone)."""

    grid: HaystackGrid
    targets: np.ndarray
    needle_tokens: dict
    decoy_tokens: dict[str, int]
    tokenizer: TokenCounter
    groups: Sequence[NeedleGroup] = ()
    merged: int = 0  # needle haystacks left out as byte-identical to another depth's
    zone_misses: int = 0  # needle haystacks whose distractors had to go inside the needle's zone
    with_distractors: int = 0  # needle haystacks with distractors

    def what_moved(self) -> list[str]:
        """One line each for merged depths and distractors inside the zone, if any."""
        lines = []
        if self.merged:
            lines.append(f"note: {self.merged} needle haystack(s) came out byte-identical to another depth's of the same "
                         "condition (few sentence boundaries in short haystacks) and are counted once; the report gives the "
                         "distinct needle positions per length")
        if self.zone_misses:
            lines.append(f"warning: {self.zone_misses} of {self.with_distractors} needle haystacks with distractors have no "
                         f"sentence boundary outside the ±{DISTRACTOR_ZONE} zone around their needle: their distractors went "
                         "to the farthest boundaries, inside it (column distractors_in_zone; the report counts them per length)")
        return lines

    def _decoys(self, group: NeedleGroup, count: int) -> tuple[list[str], int]:
        """The first ``count`` distractors of ``group`` and the tokens they take."""
        texts = list(group.distractor_texts[:count])
        return texts, sum(self.decoy_tokens[t] for t in texts)

    def _rng(self, haystack_id: str) -> np.random.Generator:
        """The stream that places the distractors of one haystack."""
        return placement_rng(self.grid.seed, haystack_id)


    def kinds(self) -> list[tuple[int, int]]:
        """The (distractor count, needle count) of each kind of needle haystack: every distractor
        count with one needle, then every needle count above one without distractors."""
        return [(count, 1) for count in self.grid.distractor_counts] + [(0, k) for k in self.grid.needles_per_haystack if k > 1]

    def other_needles(self, group: NeedleGroup, variant: str, character: str, n: int,
                      haystack_id: str) -> list[tuple[str, str, str]]:
        """``n`` needles of other groups for one haystack, as (group id, character, text): groups
        drawn without replacement from those with a character other than ``character``, each
        with a name not yet in the haystack where it has one, with a stream of its own."""
        if not n:
            return []
        rng = placement_rng(self.grid.seed, f"{haystack_id}:needles")
        candidates = [g for g in self.groups if g.id != group.id and any(name != character for name in g.characters)]
        if len(candidates) < n:
            raise ConfigError(f"haystack {haystack_id}: {n + 1} needles need {n} other groups with another character; "
                              f"the needle set has {len(candidates)}")
        used, others = {character}, []
        for index in rng.choice(len(candidates), size=n, replace=False):
            other = candidates[int(index)]
            names = [x for x in other.characters if x not in used] or [x for x in other.characters if x != character]
            name = names[int(rng.integers(len(names)))]
            used.add(name)
            others.append((other.id, name, other.needle(variant, name)))
        return others

    def check_room(self, groups: Sequence[NeedleGroup], lengths: Sequence[int]) -> None:
        """A one-line :class:`~embedeval.errors.ConfigError` when a haystack length cannot hold a
        group's longest needle and its K distractors, or K of the set's longest needles."""
        for group in groups:
            needle = max(n for (g, _, _), n in self.needle_tokens.items() if g == group.id)
            for count in (c for c in self.grid.distractor_counts if c):
                taken = needle + self._decoys(group, count)[1]
                short = [length for length in lengths if length < taken]
                if short:
                    raise ConfigError(f"haystacks of {short[0]} tokens are too short for group {group.id!r}: its needle and "
                                      f"{count} distractor(s) take {taken} tokens")
        most = max(self.grid.needles_per_haystack)
        if most > 1:
            if len(self.groups) < most:
                raise ConfigError(f"`needles_per_haystack` {most} needs at least {most} groups; the needle set has {len(self.groups)}",
                                  "needles_per_haystack")
            taken = most * max(self.needle_tokens.values())
            short = [length for length in lengths if length < taken]
            if short:
                raise ConfigError(f"haystacks of {short[0]} tokens are too short for {most} needles: they may take {taken} tokens")

    def condition_rows(self, group: NeedleGroup, length: int, filler: list[Piece]) -> list[dict]:
        """The needle haystacks of one (group, length) with their controls, for every kind
        (:meth:`kinds`).

        A needle haystack byte-identical to one of an earlier depth of the same variant and kind
        (both depths' nearest sentence boundary is the same, as in short haystacks of long
        sentences) is left out, with its control: it would be counted twice. ``self.merged``
        counts them. With K needles, the K - 1 needles of other groups go where distractors go
        (:func:`distractor_boundaries`), and the haystack has a control of its own: the same
        filler with those K - 1 needles at the same boundaries and not its own, topped up to the
        length (as a haystack with distractors has one holding its distractors), so its own
        question's separation measures its own needle alone."""
        base = {"group_id": group.id, "category": group.category, "length": length, "seed": self.grid.seed}
        controls = self.grid.controls
        plain_control = f"{group.id}:{CONTROL}:{length}"
        rows = []
        for count, n_needles in self.kinds():
            decoys, decoy_tokens = self._decoys(group, count)
            suffix = (f":x{count}" if count else "") + (f":n{n_needles}" if n_needles > 1 else "")
            marks = {N_DISTRACTORS: count, "distractors_of": group.id if count else "", N_NEEDLES: n_needles}
            own_controls = bool(count or n_needles > 1) and controls  # one control per needle haystack
            trimmed: dict[int, list[Piece]] = {}  # the filler of those controls, by the tokens put in
            for variant in self.grid.variants:
                built: set[str] = set()
                for index, target in enumerate(self.targets):
                    haystack_id = f"{group.id}:{variant}:{length}:d{index:02d}{suffix}"
                    character = draw_character(group, self.grid.seed, f"{group.id}:{length}:d{index:02d}")
                    needle = group.needle(variant, character)
                    needle_tokens = self.needle_tokens[(group.id, variant, character)]
                    others = self.other_needles(group, variant, character, n_needles - 1, haystack_id)
                    extra = [text for _, _, text in others] + decoys  # what goes away from the needle
                    extra_tokens = [self.needle_tokens[(g, variant, name)] for g, name, _ in others] + [self.decoy_tokens[d] for d in decoys]
                    pieces = trim(filler, length - needle_tokens - sum(extra_tokens), self.tokenizer)
                    needle_at = needle_boundary(pieces, float(target))
                    places, in_zone = (distractor_boundaries(pieces, len(extra), self._rng(haystack_id), needle_at, length)
                                       if extra else ([], 0))
                    inserts = [(needle_at, needle), *zip(places, extra, strict=True)]
                    text, starts = assemble(pieces, inserts)
                    if text in built:
                        self.merged += 1
                        continue
                    built.add(text)
                    self.zone_misses += bool(count and in_zone)
                    self.with_distractors += bool(count)
                    control_id = f"{group.id}:{CONTROL}:{length}:{variant}:d{index:02d}{suffix}" if own_controls else plain_control
                    needles = 1 + len(others)
                    rows.append({**base, **marks, "id": haystack_id, "variant": variant, "target_depth": float(target),
                                 "text": text, "needle_start": starts[0], "needle_end": starts[0] + len(needle),
                                 "character": character, "distractor_starts": starts[needles:],
                                 "distractors_in_zone": in_zone if count else 0,
                                 "needle_groups": [group.id, *(g for g, _, _ in others)],
                                 "needle_characters": [character, *(name for _, name, _ in others)],
                                 "needle_starts": starts[:needles],
                                 "needles_before": inserts_tokens_before(pieces, places=[k for k, _ in inserts],
                                                                         tokens=[needle_tokens, *extra_tokens])[:needles],
                                 "control_id": control_id if controls else None,
                                 "parts_tokens": _tokens_of(pieces) + needle_tokens + sum(extra_tokens),
                                 "sources": sorted({p.book for p in pieces})})
                    if own_controls:  # the same filler, the same decoys and other needles at the same boundaries; not its own
                        if sum(extra_tokens) not in trimmed:
                            trimmed[sum(extra_tokens)] = trim(filler, length - sum(extra_tokens), self.tokenizer)
                        control_pieces = trimmed[sum(extra_tokens)]
                        control = _needle_free_row({**base, **marks, "distractors_in_zone": in_zone}, control_id, CONTROL,
                                                   control_pieces, list(zip(places, extra, strict=True)), sum(extra_tokens))[0]
                        inserted = control["distractor_starts"]
                        control.update({N_NEEDLES: n_needles if n_needles > 1 else 0, "distractor_starts": inserted[len(others):],
                                        "needle_groups": [g for g, _, _ in others], "needle_characters": [c for _, c, _ in others],
                                        "needle_starts": inserted[:len(others)],
                                        "needles_before": inserts_tokens_before(control_pieces, places, extra_tokens)[:len(others)]})
                        rows.append(control)
            if not count and n_needles == 1 and controls:
                rows += _needle_free_row({**base, **marks}, plain_control, CONTROL, trim(filler, length, self.tokenizer))
        return _counted(rows, length, self.tokenizer)

    def negative_rows(self, groups: Sequence[NeedleGroup], length: int, k: int, filler: list[Piece]) -> list[dict]:
        """The ``k``-th negative of a length: plain (K = 0), and for every K > 0 one copy per group
        holding that group's K distractors at random boundaries (its question's pool)."""
        base = {"group_id": "", "category": "", "length": length, "seed": self.grid.seed}
        rows = []
        trimmed: dict[int, list[Piece]] = {}  # the filler trimmed for each distractor total
        for count in self.grid.distractor_counts:
            if not count:
                rows += _needle_free_row({**base, N_DISTRACTORS: 0, "distractors_of": ""}, f"{NEGATIVE}:{length}:{k:03d}",
                                         NEGATIVE, trim(filler, length, self.tokenizer))
                continue
            for group in groups:
                haystack_id = f"{NEGATIVE}:{length}:{k:03d}:{group.id}:x{count}"
                decoys, decoy_tokens = self._decoys(group, count)
                if decoy_tokens not in trimmed:
                    trimmed[decoy_tokens] = trim(filler, length - decoy_tokens, self.tokenizer)
                pieces = trimmed[decoy_tokens]
                places, _ = distractor_boundaries(pieces, count, self._rng(haystack_id))
                rows += _needle_free_row({**base, N_DISTRACTORS: count, "distractors_of": group.id}, haystack_id, NEGATIVE,
                                         pieces, list(zip(places, decoys, strict=True)), decoy_tokens)
        return _counted(rows, length, self.tokenizer)


def _needle_free_row(base: dict, haystack_id: str, variant: str, pieces: list[Piece],
                     decoys: Sequence[tuple[int, str]] = (), decoy_tokens: int = 0) -> list[dict]:
    """A haystack of filler alone (a control or a negative) with ``decoys`` (boundary,
    distractor; ``decoy_tokens`` tokens in all) put in, as a one-row list."""
    text, starts = assemble(pieces, decoys)
    return [{"distractors_in_zone": 0, **base, N_NEEDLES: 0, "needle_groups": [], "needle_characters": [], "needle_starts": [],
             "id": haystack_id, "variant": variant, "target_depth": None, "text": text,
             "needle_start": None, "needle_end": None, "character": None, "needles_before": [],
             "parts_tokens": _tokens_of(pieces) + decoy_tokens,
             "distractor_starts": starts, "control_id": None, "sources": sorted({p.book for p in pieces})}]


def _tokens_of(pieces: list[Piece]) -> int:
    return sum(p.n_tokens for p in pieces)


def _counted(rows: list[dict], length: int, tokenizer: TokenCounter) -> list[dict]:
    """``rows`` with ``n_tokens`` and ``depth`` (needle's token offset / n_tokens) filled in.

    ``n_tokens`` is the sum of the counts of the parts a haystack was assembled from when the
    tokenizer's counts add up over space-joined parts (:attr:`~embedeval.embedders.tokens.TokenCounter.counts_add_up`,
    true of the default reference tokenizer: the assembled text is not tokenised again, and the
    tokenizer remembers the sums, :meth:`~embedeval.embedders.tokens.TokenCounter.note_counts`),
    else the count of the assembled text."""
    parts = [row.pop("parts_tokens") for row in rows]
    if tokenizer.counts_add_up:
        counts = parts
        tokenizer.note_counts([r["text"] for r in rows], counts)  # cutting a haystack later need not split it again
    else:
        counts = tokenizer.count([r["text"] for r in rows])
    for row, n in zip(rows, counts, strict=True):
        if n > length:
            raise CorpusError(f"haystack {row['id']} came out at {n} tokens, over its target {length}")
        row["n_tokens"] = n
        row["needle_depths"] = [before / n if n else 0.0 for before in row.pop("needles_before")]
        row["depth"] = row["needle_depths"][0] if row["needle_start"] is not None else None
    return rows
