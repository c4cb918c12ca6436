"""A haystack grid's settings (:class:`HaystackGrid`), checked when the grid is made: before any
corpus is read or library of the tables imported, so that a command refuses a bad grid at once.
:func:`~embedeval.haystacks.build_haystacks` builds the haystacks of a grid."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from embedeval import options
from embedeval.bounds import MAX_NEGATIVES, MAX_TABLE_LENGTH, check_at_most
from embedeval.corpus import check_min_books
from embedeval.errors import ConfigError
from embedeval.needles import NEEDLE_VARIANTS

#: How haystacks are built, recorded with them: a run directory's haystacks of another format are
#: rebuilt, not reused (2: depths that meet at one boundary built once; distractors_in_zone;
#: 3: needle_depths, and a control of its own for every haystack with several needles).
HAYSTACK_FORMAT = 3

#: How filler is drawn (``filler``): random snippets, or contiguous passages in book order.
FILLERS = ("random", "sequential")


@dataclass(frozen=True)
class HaystackGrid:
    """The settings of a haystack grid, validated once, when it is made (one
    :class:`~embedeval.errors.ConfigError` naming the parameter): ``corpus`` (a corpus spec,
    :func:`~embedeval.corpus.load_corpus`) and the fewest books it must hold, how filler is drawn,
    the ``lengths`` (whole numbers of tokens from 16 to :data:`~embedeval.bounds.MAX_TABLE_LENGTH`, distinct), ``depths`` per length (>= 1), the
    needle ``variants``, ``negatives`` per length (>= 1), the distractor counts ``n_distractors``
    (distinct, >= 0), ``needles_per_haystack`` (distinct, >= 1; above 1 only without
    distractors), the ``seed`` and whether every condition gets a needle-free control. Sequences
    are kept as tuples. :func:`build_haystacks` takes it whole; a run's
    :class:`~embedeval.experiments.nolima.NolimaConfig` holds it as ``grid``."""

    corpus: str = options.CORPUS.field()
    lengths: tuple[int, ...] = options.LENGTHS.field()
    depths: int = options.DEPTHS.field()
    variants: tuple[str, ...] = options.VARIANTS.field()
    negatives: int = options.NEGATIVES.field()
    n_distractors: tuple[int, ...] = options.N_DISTRACTORS.field()
    needles_per_haystack: tuple[int, ...] = options.NEEDLES_PER_HAYSTACK.field()
    filler: str = options.FILLER.field()
    min_books: int = options.MIN_BOOKS.field()
    seed: int = options.SEED.field()
    controls: bool = True

    def __post_init__(self) -> None:
        for name in ("lengths", "variants", "n_distractors", "needles_per_haystack"):
            value = getattr(self, name)
            one = isinstance(value, str) or not isinstance(value, Iterable)  # 512, NaN, 2.5: one value, checked below (tuple() was a TypeError)
            object.__setattr__(self, name, (value,) if one else tuple(value))
        self._check()

    def _check(self) -> None:
        if not self.lengths:
            raise ConfigError("`lengths`: no haystack lengths given", "lengths")
        for length in self.lengths:
            if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or not 16 <= length <= MAX_TABLE_LENGTH:
                raise ConfigError(f"haystack length {length!r} is invalid: each of `lengths` is a whole number of tokens from 16 "
                                  f"to {MAX_TABLE_LENGTH:,}", "lengths")
        repeated = sorted({length for length in self.lengths if self.lengths.count(length) > 1})
        if repeated:
            raise ConfigError(f"haystack length {repeated[0]} is given more than once", "lengths")
        if not isinstance(self.depths, (int, np.integer)) or isinstance(self.depths, bool) or self.depths < 1:
            raise ConfigError(f"`depths` must be >= 1, not {self.depths!r}", "depths")
        if self.depths > min(self.lengths):  # 10**20 was numpy's 'Maximum allowed size exceeded', 10**8 gigabytes of depths
            raise ConfigError(f"`depths` must be at most the shortest haystack length, {min(self.lengths)} tokens (more depths "
                              f"than token positions only merge), not {self.depths}", "depths")
        if not isinstance(self.negatives, (int, np.integer)) or isinstance(self.negatives, bool) or self.negatives < 1:
            raise ConfigError(f"`negatives` must be a whole number >= 1, not {self.negatives!r}: each needle haystack is ranked "
                              "among them", "negatives")
        check_at_most(self.negatives, MAX_NEGATIVES, "negatives", "needle-free haystacks per length a run can hold (docs/scale.md)")
        if not self.variants:
            raise ConfigError("`variants`: no variants given", "variants")
        unknown = [v for v in self.variants if v not in NEEDLE_VARIANTS]
        if unknown:
            raise ConfigError(f"unknown variant {unknown[0]!r}; known: {', '.join(NEEDLE_VARIANTS)}", "variants")
        if len(set(self.variants)) < len(self.variants):
            raise ConfigError(f"a variant is given more than once: {', '.join(self.variants)}", "variants")
        check_min_books(self.min_books)
        options.SEED.check(self.seed)  # a negative seed was numpy's ValueError half-way through building haystacks
        if self.filler not in FILLERS:
            raise ConfigError(f"`filler` must be one of {', '.join(FILLERS)}, not {self.filler!r}", "filler")
        _check_counts(self.n_distractors, "distractor count", 0, "no distractor counts given (0 builds haystacks without distractors)")
        _check_counts(self.needles_per_haystack, "needles-per-haystack count", 1, "no needles-per-haystack counts given (1: one needle)")
        if max(self.needles_per_haystack) > 1 and max(self.n_distractors) > 0:
            raise ConfigError("`needles_per_haystack` above 1 goes with `n_distractors` 0 (a haystack holds several needles "
                              "or distractors, not both)", "needles_per_haystack", "n_distractors")

    @property
    def distractor_counts(self) -> tuple[int, ...]:
        """The distractor counts K the grid is built with (its ``n_distractors`` setting)."""
        return self.n_distractors

    def haystack_settings(self) -> dict:
        """The grid's settings without ``controls`` (a run always builds them)."""
        return {k: v for k, v in asdict(self).items() if k != "controls"}


def _check_counts(counts: Sequence[int], what: str, least: int, empty: str) -> None:
    """A non-empty list of distinct whole numbers >= ``least`` (``empty``: the error without any)."""
    parameter = "n_distractors" if least == 0 else "needles_per_haystack"
    if not counts:
        raise ConfigError(empty, parameter)
    for count in counts:
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < least:
            raise ConfigError(f"{what} {count!r} is invalid: counts are whole numbers >= {least}", parameter)
    if len(set(counts)) < len(counts):
        raise ConfigError(f"a {what} is given more than once: {', '.join(map(str, counts))}", parameter)
