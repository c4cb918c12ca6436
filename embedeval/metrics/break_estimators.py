"""Break-point estimators on a score per length: the absolute rule (a fixed threshold), the
relative rule (a share of a base over the shortest lengths), the non-increasing fit they may read,
the length a share of bootstrap resamples reach, the one-sided t-test and group count of the
at-chance test, and the chunk size a break point recommends. :mod:`embedeval.breaks` applies them
to a run's series."""

from __future__ import annotations

import math

import numpy as np

from embedeval.defaults import BASE_VISIBLE_SHARE, CHANCE_TEST_EFFECT, CHANCE_TEST_POWER, CHUNK_FACTOR, DEFAULT_BREAK_THRESHOLD, RELATIVE_BREAK_FRACTION
from embedeval.metrics.arrays import as_array, paired


def _kept_prefix(keep: np.ndarray) -> np.ndarray:
    """How many leading entries of each row of the boolean (n, L) ``keep`` are true."""
    return np.logical_and.accumulate(keep, axis=-1).sum(axis=-1)


def break_lengths(lengths, scores, threshold: float = DEFAULT_BREAK_THRESHOLD) -> np.ndarray:
    """:func:`break_point` of every row of ``scores`` at once: ``scores`` is (n, L), one column
    per length of the sorted, distinct ``lengths`` (NaN, a length not measured, breaks the run
    there). Returns n break points, 0 where a row has none."""
    lengths, scores = _length_grid(lengths, scores)
    with np.errstate(invalid="ignore"):
        kept = _kept_prefix(scores >= threshold)
    return np.where(kept > 0, lengths[np.maximum(kept - 1, 0)], 0)


def break_point(lengths, scores, threshold: float = DEFAULT_BREAK_THRESHOLD) -> int | None:
    """The largest length up to which the score stays >= ``threshold`` (the "working context"):

        L* = max { L : s(l) >= threshold for every measured l <= L }

    Lengths are sorted first; None when even the shortest length scores below the threshold.
    """
    lengths, scores = _sorted_lengths(lengths, scores)
    return int(break_lengths(lengths, scores[None, :], threshold)[0]) or None


def _sorted_lengths(lengths, scores) -> tuple[np.ndarray, np.ndarray]:
    """Paired lengths and scores, distinct lengths, sorted by length."""
    lengths, scores = paired(lengths, scores, "lengths", "scores")
    if np.unique(lengths).size != lengths.size:
        raise ValueError("lengths must be distinct")
    order = np.argsort(lengths)
    return lengths[order].astype(np.int64), scores[order]


def _length_grid(lengths, scores) -> tuple[np.ndarray, np.ndarray]:
    """Validated (sorted, distinct) lengths and an (n, L) score matrix with a column per length."""
    lengths = np.asarray(lengths, dtype=np.int64)
    scores = np.atleast_2d(np.asarray(scores, dtype=float))
    if lengths.ndim != 1 or not lengths.size or scores.shape[1] != lengths.size:
        raise ValueError(f"scores must have one column per length ({lengths.size}), not shape {scores.shape}")
    if np.any(np.diff(lengths) <= 0):
        raise ValueError("lengths must be sorted and distinct")
    return lengths, scores


def base_length_count(n_lengths: int) -> int:
    """How many of the shortest lengths a relative break point's base averages: three, but never
    more than the shorter half of the grid and at least one, ``max(1, min(3, n_lengths // 2))``
    (NoLiMa's base score averages three short lengths of eight; a grid of two or three lengths
    keeps the shortest alone)."""
    return max(1, min(3, n_lengths // 2))


def visible_base_count(visible_share, share: float = BASE_VISIBLE_SHARE) -> int:
    """How many of the shortest lengths a relative break point's base averages when the scorer may
    not see every needle: the leading lengths (sorted, one ``visible_share`` per length: the share
    of needle haystacks whose needle the scorer read) with ``visible_share >= share``, at most
    :func:`base_length_count` of them; 0 when even the shortest length hides too many needles.
    Example: MiniLM (a 256-token window) on 128..8192 sees 100%, 80%, 43%, ... -> 1 (128 alone),
    where the base would otherwise mix in lengths whose needle it cannot read."""
    visible = np.asarray(visible_share, dtype=float)
    return int(min(_kept_prefix(visible >= share), base_length_count(visible.size)))


def t_test_greater(values) -> float:
    """The one-sided p-value of a one-sample t-test that the mean of ``values`` is above 0:

        t = mean / sqrt(s² / n),  s² = mean((x - mean)²) x n / (n - 1),  p = P(T_{n-1} > t)

    (Student's t survival function, ``scipy.special.stdtr(n - 1, -t)``): bit for bit
    ``scipy.stats.ttest_1samp(values, 0, alternative="greater").pvalue``, without importing
    scipy.stats (a second on this machine). NaN where s = 0 and the mean is 0."""
    from scipy import special

    values = as_array(values, "values")
    n = values.size
    if n < 2:
        raise ValueError("a t-test needs at least 2 values")
    mean = values.mean()
    variance = np.mean((values - mean) ** 2) * (n / (n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / np.sqrt(variance / n)
    return float(special.stdtr(n - 1, -t))


def groups_for_chance_test(effect: float = CHANCE_TEST_EFFECT, power: float = CHANCE_TEST_POWER, alpha: float = 0.025) -> int:
    """The fewest question groups G with which a one-sided one-sample t-test at ``alpha`` finds
    group bases ``effect`` standard deviations above 0 with probability ``power``:

        min { G >= 2 : P(T > t_{1-alpha, G-1}) >= power },  T ~ noncentral t(G - 1, effect * sqrt(G))

    (10 for the defaults: effect 1, power 0.8, alpha 0.025). With fewer, a base the test does not
    pass cannot be told from chance, which is not the same as shown to be at chance: with 2 groups
    the test needs t > 12.7."""
    from scipy import special  # the distributions' functions alone: scipy.stats takes a second to import

    for groups in range(2, 1000):
        critical = special.stdtrit(groups - 1, 1 - alpha)  # scipy.stats.t.ppf
        if 1 - special.nctdtr(groups - 1, effect * math.sqrt(groups), critical) >= power:  # scipy.stats.nct.sf
            return groups
    raise ValueError(f"no group count below 1000 reaches power {power} for effect {effect}")


def monotone_fit(scores, weights=None) -> np.ndarray:
    """The least-squares non-increasing fit of every row of ``scores`` ((n, L), or one row of L),
    weighted by ``weights`` (the same shape, or one row for all; default 1): isotonic regression,
    in its min-max form

        f_i = min_{j <= i} max_{k >= i} (sum_{m=j..k} w_m s_m) / (sum_{m=j..k} w_m)

    A NaN score (a length not measured) weighs nothing in the fit and stays NaN. Example: 0.54,
    0.52, 0.51, 0.31, 0.43 -> 0.54, 0.52, 0.51, 0.37, 0.37 (the rise from 0.31 to 0.43 is pooled:
    one noisy length no longer stands alone below or above its neighbours)."""
    scores = np.asarray(scores, dtype=float)
    rows = np.atleast_2d(scores)
    if rows.ndim != 2 or not rows.shape[1]:
        raise ValueError(f"scores must be one or more rows of values, not shape {scores.shape}")
    weights = np.ones_like(rows) if weights is None else np.broadcast_to(np.asarray(weights, dtype=float), rows.shape)
    if np.any(~np.isfinite(weights) | (weights < 0)):
        raise ValueError("weights must be finite and >= 0")
    measured = np.isfinite(rows)
    weights = np.where(measured, weights, 0.0)
    total = np.concatenate([np.zeros((rows.shape[0], 1)), np.cumsum(weights * np.where(measured, rows, 0.0), axis=1)], axis=1)
    weight = np.concatenate([np.zeros((rows.shape[0], 1)), np.cumsum(weights, axis=1)], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):  # (n, j, k): the weighted mean of s_j..s_k
        block = (total[:, None, 1:] - total[:, :-1, None]) / (weight[:, None, 1:] - weight[:, :-1, None])
    size = rows.shape[1]
    before = np.arange(size)[:, None] > np.arange(size)[None, :]  # k < j: no block
    block = np.where(before[None] | ~np.isfinite(block), -np.inf, block)
    highest = np.flip(np.maximum.accumulate(np.flip(block, axis=2), axis=2), axis=2)  # max over k >= i, per j
    highest = np.where(before[None], np.inf, highest)  # j > i: not a start of i's block
    fit = highest.min(axis=1)
    fit = np.where(measured & np.isfinite(fit), fit, np.nan)
    return fit.reshape(scores.shape)


def relative_break_lengths(lengths, scores, fraction: float = RELATIVE_BREAK_FRACTION, n_base: int | None = None,
                           base=None, monotone: bool = False, weights=None) -> np.ndarray:
    """:func:`relative_break_point` of every row of ``scores`` at once: ``scores`` is (n, L), one
    column per length of the sorted, distinct ``lengths``; NaN marks a length a row did not
    measure (it breaks the run there); the base averages the ``n_base`` shortest lengths (default
    :func:`base_length_count`; 0: no base, no break point), or is given per row (``base``, n
    values: a base read elsewhere, as one base serves every strategy of an embedder). With
    ``monotone`` the rule reads each row's :func:`monotone_fit` (weighted by ``weights``) against
    the bar, the base still read from the scores themselves:

        L* = max { L : f(l) >= fraction * base for every l <= L },   f = monotone_fit(s, w)

    so one noisy length cannot break the run alone. Returns n break points, 0 where a row has none."""
    lengths, scores = _length_grid(lengths, scores)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], not {fraction}")
    if base is None:
        n_base = base_length_count(lengths.size) if n_base is None else n_base
        if n_base < 1:
            return np.zeros(scores.shape[0], dtype=lengths.dtype)
        with np.errstate(invalid="ignore"):
            base = scores[:, :n_base].mean(axis=1)
    base = np.broadcast_to(np.asarray(base, dtype=float), (scores.shape[0],))
    read = monotone_fit(scores, weights) if monotone else scores
    with np.errstate(invalid="ignore"):
        kept = _kept_prefix(read >= fraction * base[:, None])
    kept = np.where(np.isfinite(base) & (base > 0), kept, 0)
    return np.where(kept > 0, lengths[np.maximum(kept - 1, 0)], 0)


def supported_break(points, support: float) -> int:
    """The longest break length that at least ``support`` of the resampled break points ``points``
    reach (0 = none, the lowest):

        L^ = max { L in points or 0 : (1 / B) #{ b : points_b >= L } >= support }

    the (1 - support) quantile of the resamples, none counted lowest. With a length that at least
    ``support`` >= 0.5 of the resamples give, that length; where they split (40% at 128 and 38% at
    512 tokens), the longer lengths are not supported and the answer is the safer, shorter one
    (128 here: 78% reach it). 0 for no resamples."""
    points = np.asarray(points, dtype=np.int64).ravel()
    if not 0 < support <= 1:
        raise ValueError(f"support must be in (0, 1], not {support}")
    if not points.size:
        return 0
    found, counts = np.unique(points, return_counts=True)
    reach = np.cumsum(counts[::-1])[::-1] / points.size  # the share of resamples at or above each length
    return int(found[reach >= support - 1e-12].max())


def relative_break_point(lengths, scores, fraction: float = RELATIVE_BREAK_FRACTION) -> int | None:
    """The largest length up to which the score stays >= ``fraction`` x its base, the mean over
    the ``b`` shortest lengths measured (:func:`base_length_count`: b = 3 of 7 or 8 lengths, 1 of
    2 or 3), as NoLiMa reads an effective length against a short-context base:

        base = (1 / b) sum_{i <= b} s(l_i),   L* = max { L : s(l) >= fraction * base for every l <= L }

    None when the base is not positive (nothing to keep) or not finite. The break point reads any
    score; embedeval reads it on chance-corrected recall@k (:func:`~embedeval.metrics.ranking.chance_corrected_recall`), so a
    scorer at chance has a base of about 0 (and :mod:`embedeval.breaks` gives none when the base's
    interval reaches 0). Example: lengths 128, 256, 512 with scores 0.60, 0.52, 0.49 and fraction
    0.85 -> b = 1, the bar is 0.51, so L* = 256; with 0.60, 0.52, 0.49, 0.40 at 128..1024 -> b = 2,
    base 0.56, bar 0.476, L* = 512.
    """
    lengths, scores = _sorted_lengths(lengths, scores)
    return int(relative_break_lengths(lengths, scores[None, :], fraction)[0]) or None


def recommended_chunk_tokens(break_point_tokens: int | None, window: int | None = None) -> int | None:
    """floor(CHUNK_FACTOR * break point), CHUNK_FACTOR = 0.8: a chunk size with a safety margin
    below the break point; with ``window`` (the tokens a model reads of one text, when it reads
    one window), at most that: min(floor(0.8 * L*), window)."""
    if break_point_tokens is None:
        return None
    chunk = int(math.floor(CHUNK_FACTOR * break_point_tokens))
    return chunk if window is None else min(chunk, int(window))
