"""Bootstrap confidence intervals: the percentile bootstrap of independent values, and the cluster
bootstrap that resamples whole question groups (every resample's statistic at once where the
statistic allows it)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from embedeval.bounds import MAX_N_BOOTSTRAP
from embedeval.defaults import DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from embedeval.metrics.arrays import as_array
from embedeval.metrics.moments import cohens_d, mean_difference, pearson_r, regression_intercept, regression_slope, spearman_rho
from embedeval.metrics.separation import auc_score


def bootstrap_ci(
    values, stat: Callable = np.mean, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED, confidence: float = 0.95, paired: bool = False
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``stat`` (scipy.stats.bootstrap).

    ``values`` is one sample, or a tuple of samples for a multi-sample statistic such as
    ``auc_score(pos, neg)`` (resampled independently, or together when ``paired``).
    A statistic with an ``axis`` argument is evaluated vectorised.
    """
    from scipy import stats

    samples = tuple(as_array(v, "values") for v in values) if isinstance(values, tuple) else (as_array(values, "values"),)
    if all(s.size == 1 or np.ptp(s) == 0 for s in samples):
        point = float(stat(*samples))
        return point, point
    result = stats.bootstrap(
        samples, stat, n_resamples=n_resamples, confidence_level=confidence,
        method="percentile", paired=paired, rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def cluster_resamples(n_clusters: int, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """The resamples of a cluster bootstrap: each draws ``n_clusters`` clusters with replacement.
    Returns ``draws`` ((n_resamples, n_clusters) cluster indices) and ``weights`` (how many times
    each cluster was drawn, same shape; at most :data:`~embedeval.bounds.MAX_N_BOOTSTRAP`
    resamples), so a resampled mean of per-cluster sums S and counts N is
    ``weights @ S / weights @ N``. The same seed gives the same resamples everywhere (read-only
    arrays, made once per size and seed: a run's cells share them)."""
    if n_clusters < 1 or n_resamples < 1:
        raise ValueError(f"need at least one cluster and one resample, not {n_clusters} and {n_resamples}")
    if n_resamples > MAX_N_BOOTSTRAP:  # 10**11 was "Unable to allocate 1.46 TiB" after a run's tables were written
        raise ValueError(f"{n_resamples:,} resamples is past the {MAX_N_BOOTSTRAP:,} a run can hold (embedeval.bounds)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"the seed of the resamples is a whole number, not {seed!r}")
    return _cluster_resamples(int(n_clusters), int(n_resamples), int(seed))


@functools.lru_cache(maxsize=64)
def _cluster_resamples(n_clusters: int, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    draws = np.random.default_rng(seed).integers(n_clusters, size=(n_resamples, n_clusters))
    offsets = np.arange(n_resamples)[:, None] * n_clusters
    weights = np.bincount((draws + offsets).ravel(), minlength=n_resamples * n_clusters).reshape(n_resamples, n_clusters)
    weights = weights.astype(float)
    draws.flags.writeable = weights.flags.writeable = False
    return draws, weights


#: The statistics that take frequency weights (a pair, one per sample): :func:`cluster_bootstrap_ci`
#: computes every resample of these at once.
WEIGHTED_STATISTICS = frozenset({mean_difference, cohens_d, pearson_r, spearman_rho, regression_slope, regression_intercept})

#: About how many (resample, row) values a weighted bootstrap statistic holds at once (:func:`cluster_bootstrap_ci`).
RESAMPLE_BLOCK = 1_000_000


def cluster_bootstrap_ci(
    stat: Callable, samples: tuple, clusters: tuple, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile confidence interval of ``stat(*samples)`` when rows come in clusters.

    Rows of one cluster (one question group: the same question, the same filler) are not
    independent, so a resample draws the C clusters with replacement and keeps every row of each
    drawn cluster, once per draw; ``clusters[i]`` labels the rows of ``samples[i]`` (samples that
    share labels, e.g. ``(depth, score)``, are resampled together). The interval is the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the resampled statistics.

    The mean of one sample and :func:`~embedeval.metrics.separation.auc_score` of two are computed exactly from per-cluster
    sums (a resample is a vector of cluster counts w: mean = w·S / w·N, AUC = wᵀ K w /
    (w·n_pos)(w·n_neg) with K the per-cluster-pair sums of 1[p > n] + ½ 1[p = n]); any other
    statistic is recomputed on every resample: all at once, along ``axis``, when every cluster has
    the same number of rows, as in the paired design; else all at once from the rows weighted by
    their cluster's draws when the statistic takes frequency ``weights`` (a resample that draws
    cluster c k times holds each of its rows k times); else one resample at a time.
    """
    samples = tuple(as_array(s, "values") for s in samples)
    clusters = tuple(np.asarray(c) for c in clusters)
    if len(samples) != len(clusters) or any(s.size != c.size for s, c in zip(samples, clusters, strict=True)):
        raise ValueError("every sample needs one cluster label per value")
    labels = np.unique(np.concatenate([c.astype(str) for c in clusters]))
    codes = [np.searchsorted(labels, c.astype(str)) for c in clusters]
    n_clusters = labels.size
    draws, weights = cluster_resamples(n_clusters, n_resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        if stat is np.mean and len(samples) == 1:
            sums, counts = np.bincount(codes[0], samples[0], n_clusters), np.bincount(codes[0], minlength=n_clusters)
            values = (weights @ sums) / (weights @ counts)
        elif stat is auc_score and len(samples) == 2:
            pos, neg = samples
            kernel = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
            onehot_pos, onehot_neg = np.eye(n_clusters)[codes[0]], np.eye(n_clusters)[codes[1]]
            pair_sums = onehot_pos.T @ kernel @ onehot_neg
            values = np.einsum("bc,cd,bd->b", weights, pair_sums, weights) / (
                (weights @ onehot_pos.sum(0)) * (weights @ onehot_neg.sum(0)))
        else:
            members = [[np.flatnonzero(code == c) for c in range(n_clusters)] for code in codes]
            sizes = [{len(rows) for rows in sample_members} for sample_members in members]
            if all(len(size) == 1 and size != {0} for size in sizes) and "axis" in inspect.signature(stat).parameters:
                # Every cluster has as many rows as the others: stack all resamples, one vectorised call.
                parts = [np.stack(sample_members)[draws].reshape(n_resamples, -1) for sample_members in members]
                values = np.asarray(stat(*(s[p] for s, p in zip(samples, parts, strict=True)), axis=-1), dtype=float)
            elif stat in WEIGHTED_STATISTICS:  # by name: another function's ``weights`` may mean something else (np.average)
                # A resample holds each row as many times as its cluster was drawn: the statistic of
                # every resample at once, from the rows weighted by those counts (blocks of resamples
                # keep the (resamples, rows) arrays to about RESAMPLE_BLOCK values).
                block = max(1, RESAMPLE_BLOCK // max(s.size for s in samples))
                values = np.concatenate([
                    np.asarray(stat(*(s[None, :] for s in samples), weights=tuple(weights[b:b + block][:, code] for code in codes)),
                               dtype=float).reshape(-1)
                    for b in range(0, n_resamples, block)])
            else:
                values = np.full(n_resamples, np.nan)
                for b, row in enumerate(draws):
                    parts = [np.concatenate([rows[c] for c in row]) for rows in members]
                    if all(p.size for p in parts):
                        values[b] = stat(*(s[p] for s, p in zip(samples, parts, strict=True)))
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))
