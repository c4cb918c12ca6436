"""Two-sample and paired statistics on arrays, each with optional frequency weights (a row counted
w times: the cluster bootstrap's resamples, :mod:`embedeval.metrics.bootstrap`): the mean difference,
Cohen's d, Pearson's r, Spearman's rho and the least-squares slope and intercept. Vectorised over
leading axes, so one call serves a sample and a stack of resamples."""

from __future__ import annotations

import numpy as np

from embedeval.metrics.arrays import as_array


def _along(values, axis: int) -> np.ndarray:
    """``values`` as floats with ``axis`` moved last (statistics below reduce the last axis, so
    one code path serves a sample and a stack of bootstrap resamples)."""
    return np.moveaxis(np.asarray(values, dtype=float), axis, -1)


def _scalar(value):
    """A 0-d result as a Python float, anything else as it is."""
    return float(value) if np.ndim(value) == 0 else value


def _weights_along(weights, index: int, like: np.ndarray, axis: int) -> np.ndarray:
    """Sample ``index``'s frequency weights (``weights[index]``) with ``axis`` moved last, broadcast
    with its sample ``like`` (one row of values may take a stack of weights: one per resample)."""
    if not isinstance(weights, (tuple, list)) or len(weights) != 2:
        raise ValueError("weights are a pair: one array of frequency weights per sample")
    w = _along(weights[index], axis)
    if w.ndim == 0 or w.shape[-1] != like.shape[-1]:
        raise ValueError(f"weights of shape {w.shape} for a sample of {like.shape[-1]} values: one weight per value")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and not negative (how many times each value is counted)")
    return np.broadcast_to(w, np.broadcast_shapes(w.shape, like.shape))


def _weighted_mean(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum(w x) / sum(w) over the last axis: the mean of a sample that holds x_i w_i times."""
    return (w * x).sum(-1) / w.sum(-1)


def _weighted_moments(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """sum(w dx dy), sum(w dx²), sum(w dy²) over the last axis, d the deviation from the weighted mean."""
    dx, dy = x - _weighted_mean(x, w)[..., None], y - _weighted_mean(y, w)[..., None]
    return (w * dx * dy).sum(-1), (w * dx * dx).sum(-1), (w * dy * dy).sum(-1)


def _paired_weights(weights, x: np.ndarray, axis: int) -> np.ndarray:
    """The one set of frequency weights of a paired statistic's two samples (``weights[0]``,
    which ``weights[1]`` must equal: a pair is counted as a whole)."""
    w = _weights_along(weights, 0, x, axis)
    if len(weights) != 2 or not np.array_equal(w, _weights_along(weights, 1, x, axis)):
        raise ValueError("a paired statistic needs the same weights for both samples")
    return w


def mean_difference(pos, neg, axis: int = -1, weights=None):
    """mean(pos) - mean(neg); vectorised over leading axes. ``weights``: a pair of frequency
    weights (row i of a sample counted w_i times; the cluster bootstrap's resamples), means
    sum(w x) / sum(w)."""
    pos, neg = _along(pos, axis), _along(neg, axis)
    if weights is None:
        return _scalar(pos.mean(-1) - neg.mean(-1))
    return _scalar(_weighted_mean(pos, _weights_along(weights, 0, pos, axis)) - _weighted_mean(neg, _weights_along(weights, 1, neg, axis)))


def cohens_d(pos, neg, axis: int = -1, weights=None):
    """(mean(pos) - mean(neg)) / s_pooled, s_pooled = sqrt(((n1-1)s1² + (n2-1)s2²) / (n1+n2-2)).

    NaN when the pooled standard deviation is 0; vectorised over leading axes. ``weights``: a
    pair of frequency weights (:func:`mean_difference`): n = sum(w), (n-1)s² = sum(w (x - mean)²),
    and a resample with too few values is NaN rather than an error.
    """
    pos, neg = _along(pos, axis), _along(neg, axis)
    if weights is not None:
        w1, w2 = _weights_along(weights, 0, pos, axis), _weights_along(weights, 1, neg, axis)
        n1, n2 = w1.sum(-1), w2.sum(-1)
        ss1, ss2 = _weighted_moments(pos, pos, w1)[0], _weighted_moments(neg, neg, w2)[0]
        mean_gap = _weighted_mean(pos, w1) - _weighted_mean(neg, w2)
    else:
        if pos.ndim == 1:
            pos, neg = as_array(pos, "pos"), as_array(neg, "neg")
        n1, n2 = pos.shape[-1], neg.shape[-1]
        if n1 + n2 < 3:
            raise ValueError("Cohen's d needs at least 3 values in all")
        ss1 = pos.var(-1, ddof=1) * (n1 - 1) if n1 > 1 else np.zeros(pos.shape[:-1])
        ss2 = neg.var(-1, ddof=1) * (n2 - 1) if n2 > 1 else np.zeros(neg.shape[:-1])
        mean_gap = pos.mean(-1) - neg.mean(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = np.sqrt((ss1 + ss2) / (n1 + n2 - 2))
        d = np.where(pooled > 0, mean_gap / np.where(pooled > 0, pooled, 1.0), np.nan)
    return _scalar(d)


def pearson_r(x, y, axis: int = -1, weights=None):
    """cov(x, y) / (sd(x) sd(y)); vectorised over leading axes (equals ``scipy.stats.pearsonr``).
    ``weights``: the pairs' frequency weights, given twice (one per sample, equal):
    r = sum(w dx dy) / sqrt(sum(w dx²) sum(w dy²)), d the deviation from the weighted mean."""
    x, y = _along(x, axis), _along(y, axis)
    if weights is not None:
        xy, xx, yy = _weighted_moments(x, y, _paired_weights(weights, x, axis))
        return _scalar(xy / np.sqrt(xx * yy))
    dx, dy = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
    return _scalar((dx * dy).sum(-1) / np.sqrt((dx * dx).sum(-1) * (dy * dy).sum(-1)))


def weighted_ranks(x, w) -> np.ndarray:
    """The average rank (1-based, ties sharing the mean of their ranks) each value of ``x`` has in
    the sample that holds x_i w_i times, over the last axis: W(< x_i) + (W(= x_i) + 1) / 2, W the
    summed weights. With every weight 1 it is ``scipy.stats.rankdata``; ``x`` may be one row for a
    stack of weights (one sample, many resamples)."""
    x, w = np.asarray(x, dtype=float), np.asarray(w, dtype=float)
    shape = np.broadcast_shapes(x.shape, w.shape)
    order = np.argsort(x, axis=-1, kind="stable")  # on x as given: one sort serves every row of weights
    ordered = np.take_along_axis(x, order, axis=-1)
    n, edge = x.shape[-1], np.ones(x.shape[:-1] + (1,), dtype=bool)
    starts = np.concatenate([edge, ordered[..., 1:] != ordered[..., :-1]], axis=-1)  # a tie group's first position
    ends = np.concatenate([starts[..., 1:], edge], axis=-1)
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, np.arange(n), n - 1), -1), axis=-1), -1)
    order, first, last = (np.broadcast_to(a, shape) for a in (order, first, last))
    cumulative = np.cumsum(np.take_along_axis(np.broadcast_to(w, shape), order, axis=-1), axis=-1)
    before = np.where(first > 0, np.take_along_axis(cumulative, np.maximum(first - 1, 0), axis=-1), 0.0)
    tied = np.take_along_axis(cumulative, last, axis=-1) - before
    ranks = np.empty(shape)
    np.put_along_axis(ranks, order, before + (tied + 1) / 2, axis=-1)
    return np.where(np.isnan(x).any(-1, keepdims=True), np.nan, ranks)  # as scipy.stats.rankdata: NaN in, NaN out


def spearman_rho(x, y, axis: int = -1, weights=None):
    """Pearson r of the ranks (average ranks for ties); equals ``scipy.stats.spearmanr``.
    ``weights``: the pairs' frequency weights (:func:`pearson_r`): the ranks the values have in
    the sample that holds each pair w times (:func:`weighted_ranks`), correlated with those weights."""
    x, y = _along(x, axis), _along(y, axis)
    w = np.ones(np.broadcast_shapes(x.shape, y.shape)) if weights is None else _paired_weights(weights, x, axis)
    return pearson_r(weighted_ranks(x, w), weighted_ranks(y, w), weights=None if weights is None else (w, w))


def regression_slope(x, y, axis: int = -1, weights=None):
    """Least-squares slope of ``y = slope * x + intercept``: cov(x, y) / var(x). ``weights``: the
    pairs' frequency weights (:func:`pearson_r`): sum(w dx dy) / sum(w dx²)."""
    x, y = _along(x, axis), _along(y, axis)
    if weights is not None:
        xy, xx, _ = _weighted_moments(x, y, _paired_weights(weights, x, axis))
        return _scalar(xy / xx)
    dx, dy = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
    return _scalar((dx * dy).sum(-1) / (dx * dx).sum(-1))


def regression_intercept(x, y, axis: int = -1, weights=None):
    """Least-squares intercept: mean(y) - slope * mean(x) (weighted means with ``weights``,
    :func:`regression_slope`)."""
    x, y = _along(x, axis), _along(y, axis)
    if weights is not None:
        w = _paired_weights(weights, x, axis)
        return _scalar(_weighted_mean(y, w) - np.asarray(regression_slope(x, y, weights=weights)) * _weighted_mean(x, w))
    return _scalar(y.mean(-1) - np.asarray(regression_slope(x, y)) * x.mean(-1))
