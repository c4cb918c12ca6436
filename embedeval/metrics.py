"""Metrics of the NoLiMa-for-embeddings study: pure, vectorised functions on arrays.

No I/O and no models. Every function validates its input and raises ``ValueError`` saying what
is wrong (empty, mismatched lengths, NaN, zero denominators, a single class).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from embedeval.bounds import MAX_N_BOOTSTRAP
from embedeval.defaults import (
    BASE_VISIBLE_SHARE, CHANCE_TEST_EFFECT, CHANCE_TEST_POWER, CHUNK_FACTOR, DEFAULT_BREAK_THRESHOLD, DEFAULT_N_BOOTSTRAP,
    DEFAULT_SEED, RELATIVE_BREAK_FRACTION,
)
from embedeval.labels import BREAK_METRICS, RETRIEVAL_MEASURES  # noqa: F401  (named here as they always were)

BUCKET_NAMES_3 = ("beginning", "middle", "end")


def _as_array(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


def _paired(a, b, name_a: str, name_b: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = _as_array(a, name_a), _as_array(b, name_b)
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} have different lengths ({a.size} vs {b.size})")
    return a, b


def normalized_similarity(sim_qh, sim_qn) -> np.ndarray:
    """sim(q, haystack) / sim(q, needle alone), element-wise.

    1.0: the haystack is as close to the question as the bare needle; lower values mean the
    filler dilutes the needle. Example (Jina study): 0.2391 / 0.3598 = 0.66454.
    """
    sim_qh, sim_qn = _paired(sim_qh, sim_qn, "sim_qh", "sim_qn")
    if np.any(sim_qn == 0):
        raise ValueError("sim_qn contains zeros: normalized similarity is undefined")
    return sim_qh / sim_qn


def comparative_ratio(sim_pos, sim_neg) -> float:
    """Share of pairs where the haystack holding the needle beats the needle-free one.

    ratio = mean_i( 1[pos_i > neg_i] + 0.5 * 1[pos_i == neg_i] ); 0.5 is chance, 1.0 always found.
    """
    return float(np.mean(win_scores(sim_pos, sim_neg)))


def win_scores(pos, neg) -> np.ndarray:
    """Per pair: 1 if pos > neg, 0.5 on a tie, 0 otherwise (their mean is the comparative ratio)."""
    pos, neg = _paired(pos, neg, "sim_pos", "sim_neg")
    return (pos > neg) + 0.5 * (pos == neg)


class Separation(NamedTuple):
    """How well sim(q, haystack) separates haystacks with q's needle from those without."""

    mean_diff: float
    auc: float
    cohens_d: float
    n_pos: int
    n_neg: int


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
            pos, neg = _as_array(pos, "pos"), _as_array(neg, "neg")
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


def separation(pos, neg) -> Separation:
    """Mean difference, ROC AUC (scikit-learn ``roc_auc_score``) and Cohen's d.

    Positives: sim(q, haystacks with q's needle); negatives: sim(q, same-length haystacks
    without an answer to q). AUC = P(pos > neg) + 0.5 P(pos == neg); 0.5 chance, 1.0 perfect.
    """
    pos = _as_array(pos, "pos (no positive scores: AUC needs both classes)")
    neg = _as_array(neg, "neg (no negative scores: AUC needs both classes)")
    from sklearn.metrics import roc_auc_score  # here: scikit-learn takes a while to import

    labels = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    auc = float(roc_auc_score(labels, np.r_[pos, neg]))
    return Separation(float(pos.mean() - neg.mean()), auc, cohens_d(pos, neg), int(pos.size), int(neg.size))


def auc_score(pos, neg, axis: int = -1) -> np.ndarray | float:
    """AUC by the Mann-Whitney formula, mean over pairs of 1[p > n] + 0.5 * 1[p == n].

    Vectorised over leading axes (used for bootstrap resamples); equals ``roc_auc_score``.
    """
    pos, neg = np.moveaxis(np.asarray(pos, float), axis, -1), np.moveaxis(np.asarray(neg, float), axis, -1)
    p, n = pos[..., :, None], neg[..., None, :]
    return ((p > n) + 0.5 * (p == n)).mean(axis=(-2, -1))


#: trec_eval's names for the retrieval measures (:data:`~embedeval.labels.RETRIEVAL_MEASURES`,
#: computed by pytrec_eval).
_TREC_MEASURES = {"recall@1": "recall_1", "recall@5": "recall_5", "recall@10": "recall_10", "mrr": "recip_rank",
                  "ndcg@1": "ndcg_cut_1", "ndcg@10": "ndcg_cut_10"}


def retrieval_measures(pos_scores, pool_scores, in_pool=None) -> dict[str, np.ndarray]:
    """Each positive ranked among its pool (LongEmbed-style, one relevant candidate per query):
    ``{"rank", "ties", "n_candidates", *RETRIEVAL_MEASURES}``, an array per key.

    ``pos_scores[i]`` is query i's score for its needle haystack, ``pool_scores[i, j]`` its score
    for the j-th candidate that does not answer it; ``in_pool[i, j]`` (boolean, default all true)
    says whether candidate j is in query i's pool at all, so queries sharing a table of candidates
    may each leave some out (in :func:`~embedeval.similarity.retrieval_rows`' ``all`` pool, the
    haystacks holding the query's own needle); outside the pool a score may be anything, NaN
    included. With m_i = #{j in pool i}, ties are broken against the positive:
    ``rank = 1 + #{j in pool: pool >= pos}``, ``ties = #{j in pool: pool == pos}``, ``n_candidates = m_i + 1``.
    ``recall@k`` = 1[rank <= k], ``mrr`` = 1 / rank, ``ndcg@k`` = 1 / log2(rank + 1) if rank <= k
    (k = 1, 10; the ideal DCG of one relevant item is 1, so ndcg@1 = recall@1) are computed by
    trec_eval (``pytrec_eval``), fed the real scores with the positive's nudged just below any
    equal one, so its tie-breaking agrees; ``mrr@10`` = trec_eval's ``mrr`` where rank <= 10, else 0
    (MTEB's ``mrr_at_10``).
    ``query_auc`` = (#{pool < pos} + 0.5 #{pool == pos}) / m_i: the share of the pool it beats.
    """
    import pytrec_eval

    pos = _as_array(pos_scores, "pos_scores").astype(np.float32)
    pool = np.asarray(pool_scores, dtype=np.float32)
    if pool.ndim != 2 or pool.shape[0] != pos.size or pool.shape[1] == 0:
        raise ValueError(f"pool_scores must be a ({pos.size}, m >= 1) array, not shape {pool.shape}")
    mask = np.ones(pool.shape, dtype=bool) if in_pool is None else np.asarray(in_pool, dtype=bool)
    if mask.shape != pool.shape:
        raise ValueError(f"in_pool must have pool_scores' shape {pool.shape}, not {mask.shape}")
    size = mask.sum(axis=1)
    if (size == 0).any() or not np.isfinite(pool[mask]).all():
        raise ValueError("every query needs a pool of at least one candidate, with finite scores")
    above = ((pool > pos[:, None]) & mask).sum(axis=1)
    ties = ((pool == pos[:, None]) & mask).sum(axis=1)
    below = size - above - ties
    nudged = np.nextafter(pos, np.float32(-np.inf))  # below an equal pool score, above any lower one
    qrels = {str(i): {"positive": 1} for i in range(pos.size)}
    run = {str(i): {"positive": float(nudged[i]), **{f"c{j}": float(pool[i, j]) for j in np.flatnonzero(mask[i])}}
           for i in range(pos.size)}
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1,5,10", "recip_rank", "ndcg_cut.1,10"}).evaluate(run)
    table = {"rank": 1 + above + ties, "ties": ties, "n_candidates": size + 1}
    for name, trec_name in _TREC_MEASURES.items():
        table[name] = np.array([trec[str(i)][trec_name] for i in range(pos.size)])
    table["mrr@10"] = np.where(table["rank"] <= 10, table["mrr"], 0.0)
    table["query_auc"] = (below + 0.5 * ties) / size
    return {name: table[name] for name in ("rank", "ties", "n_candidates", *RETRIEVAL_MEASURES)}


def mmr(relevance, similarity, k: int, lam: float = 0.5) -> list[int]:
    """Maximal marginal relevance (Carbonell & Goldstein, 1998): ``k`` items picked one at a time,
    each the unpicked item i maximising

        lam * relevance[i] - (1 - lam) * max_{j picked} similarity[i, j]

    (the second term is 0 for the first pick), so each pick is relevant and unlike those before it.
    ``relevance``: (n,) scores (e.g. cosine to a cluster's centroid); ``similarity``: (n, n) pairwise
    scores. ``lam = 1`` is plain relevance order; ties go to the lower index. Returns indices in
    pick order (all n when k >= n)."""
    relevance = _as_array(relevance, "relevance")
    similarity = np.asarray(similarity, dtype=float)
    if similarity.shape != (relevance.size, relevance.size):
        raise ValueError(f"similarity must be ({relevance.size}, {relevance.size}), not {similarity.shape}")
    if not 0 <= lam <= 1:
        raise ValueError(f"lam must be in [0, 1], not {lam}")
    if k < 1:
        raise ValueError(f"k must be >= 1, not {k}")
    picked: list[int] = []
    closest = np.full(relevance.size, -np.inf)  # each item's highest similarity to a pick so far
    free = np.ones(relevance.size, dtype=bool)
    for _ in range(min(k, relevance.size)):
        score = lam * relevance - (1 - lam) * (closest if picked else 0.0)
        score = np.where(free, score, -np.inf)
        best = int(np.argmax(score))
        picked.append(best)
        free[best] = False
        closest = np.maximum(closest, similarity[:, best])
    return picked


def _unit_rows(vectors, name: str) -> np.ndarray:
    array = np.asarray(vectors, dtype=float)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (n, d) array, not shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"{name} has a row of norm 0 (no direction, no cosine)")
    return array / norms


#: Bytes of one block of cosines in :func:`nearest_cosines` (queries are taken this many at a time).
_BLOCK_BYTES = 1 << 26


def nearest_cosines(queries, reference, k: int, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest cosines of each row of ``queries`` (n, d) to the rows of ``reference``
    (m, d), highest first, and the reference rows they belong to: two (n, k') arrays,

        cos(q, r) = q . r / (|q| |r|),   k' = min(k, m)

    With ``exclude_self`` the queries are the reference rows themselves (n = m) and row i leaves
    reference row i out (leave-one-out), so k' = min(k, m - 1). Computed as matrix products over
    blocks of queries (memory stays about 64 MiB whatever n and m). The cosines are exact; among
    rows of equal cosine at the k'-th place, which are reported is not specified."""
    q, r = _unit_rows(queries, "queries"), _unit_rows(reference, "reference")
    if q.shape[1] != r.shape[1]:
        raise ValueError(f"queries and reference have different dimensions ({q.shape[1]} vs {r.shape[1]})")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a whole number >= 1, not {k!r}")
    if exclude_self and (q.shape != r.shape or r.shape[0] < 2):
        raise ValueError(f"exclude_self needs the reference itself as queries with at least 2 rows, not {q.shape} and {r.shape}")
    m = r.shape[0]
    k = min(k, m - exclude_self)
    cosines, rows = np.empty((q.shape[0], k)), np.empty((q.shape[0], k), dtype=int)
    step = max(1, _BLOCK_BYTES // (8 * m))
    for start in range(0, q.shape[0], step):
        block = q[start:start + step] @ r.T
        if exclude_self:
            block[np.arange(block.shape[0]), np.arange(start, start + block.shape[0])] = -np.inf
        top = np.argpartition(-block, k - 1, axis=1)[:, :k]  # the k highest, in no order
        values = np.take_along_axis(block, top, axis=1)
        order = np.lexsort((top, -values), axis=1)  # highest first, then the lower row
        rows[start:start + step] = np.take_along_axis(top, order, axis=1)
        cosines[start:start + step] = np.take_along_axis(values, order, axis=1)
    return cosines, rows


def neighbour_similarity(queries, reference, k: int, exclude_self: bool = False) -> np.ndarray:
    """Each query's mean cosine to its ``k`` nearest reference rows (:func:`nearest_cosines`):

        s(q) = (1 / k') * sum of the k' highest cos(q, r) over r in reference,   k' = min(k, m)

    all m rows when the reference has fewer than k; with ``exclude_self`` (queries = reference)
    row i leaves itself out and k' = min(k, m - 1). Returns an (n,) array."""
    return nearest_cosines(queries, reference, k, exclude_self)[0].mean(axis=1)


def percentile_rank(values, reference, tolerance: float = 0.0) -> np.ndarray:
    """Where each value stands among ``reference``, in percent, ties counted half:

        P(v) = 100 * (#{r in reference: r < v - t} + 0.5 * #{r: |r - v| <= t}) / |reference|

    with t = ``tolerance`` (values this close are ties: rounding noise, as when the same vector
    is scored in two matrix products); at t = 0, scipy's ``percentileofscore(..., kind="mean")``.
    0 below every reference value, 100 above every one. Returns an array shaped like ``values``."""
    values = np.asarray(values, dtype=float)
    if not np.isfinite(values).all():
        raise ValueError("values contains NaN or infinite values")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, not {tolerance}")
    ordered = np.sort(_as_array(reference, "reference"))
    below = np.searchsorted(ordered, values - tolerance, side="left")
    at_or_below = np.searchsorted(ordered, values + tolerance, side="right")
    return 100 * (below + 0.5 * (at_or_below - below)) / ordered.size


class PositionEffects(NamedTuple):
    """How a score depends on the needle's depth (0 = start, 1 = end)."""

    pearson_r: float
    spearman_rho: float
    slope: float
    intercept: float
    buckets: pd.DataFrame


def position_effects(depth, score, n_buckets: int = 3) -> PositionEffects:
    """Pearson r, Spearman rho, least-squares ``score = slope * depth + intercept``, and
    per-bucket statistics over ``n_buckets`` equal-width depth bins (3 -> beginning/middle/end).

    ``buckets`` columns: bucket, lo, hi, n, mean, std (std with ddof=1; NaN for n < 2).
    """
    depth, score = _paired(depth, score, "depth", "score")
    if depth.size < 3:
        raise ValueError("position effects need at least 3 points")
    if np.ptp(depth) == 0:
        raise ValueError("all depths are equal: no position effect can be estimated")
    if n_buckets < 1:
        raise ValueError("n_buckets must be >= 1")
    if np.ptp(score) == 0:
        r = rho = float("nan")
    else:
        r, rho = pearson_r(depth, score), spearman_rho(depth, score)
    edges, names = bucket_edges(n_buckets), bucket_names(n_buckets)
    which = depth_bucket_index(depth, n_buckets)
    rows = []
    for i in range(n_buckets):
        values = score[which == i]
        rows.append({
            "bucket": names[i], "lo": edges[i], "hi": edges[i + 1], "n": int(values.size),
            "mean": float(values.mean()) if values.size else float("nan"),
            "std": float(values.std(ddof=1)) if values.size > 1 else float("nan"),
        })
    return PositionEffects(r, rho, regression_slope(depth, score), regression_intercept(depth, score), pd.DataFrame(rows))


def bucket_edges(n_buckets: int) -> np.ndarray:
    """``n_buckets`` equal-width depth bins over [0, 1]: their ``n_buckets + 1`` edges."""
    return np.linspace(0.0, 1.0, n_buckets + 1)


def bucket_names(n_buckets: int) -> tuple[str, ...]:
    """beginning/middle/end for 3 buckets, else "bucket 1".."bucket n"."""
    return BUCKET_NAMES_3 if n_buckets == 3 else tuple(f"bucket {i + 1}" for i in range(n_buckets))


def depth_bucket_index(depth, n_buckets: int = 3) -> np.ndarray:
    """Index of each depth's bin; bins are [lo, hi) except the last, which includes 1.0."""
    depth = np.asarray(depth, dtype=float)
    return np.clip(np.searchsorted(bucket_edges(n_buckets), depth, side="right") - 1, 0, n_buckets - 1)


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
    lengths, scores = _paired(lengths, scores, "lengths", "scores")
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

    values = _as_array(values, "values")
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
    score; embedeval reads it on chance-corrected recall@k (:func:`chance_corrected_recall`), so a
    scorer at chance has a base of about 0 (and :mod:`embedeval.breaks` gives none when the base's
    interval reaches 0). Example: lengths 128, 256, 512 with scores 0.60, 0.52, 0.49 and fraction
    0.85 -> b = 1, the bar is 0.51, so L* = 256; with 0.60, 0.52, 0.49, 0.40 at 128..1024 -> b = 2,
    base 0.56, bar 0.476, L* = 512.
    """
    lengths, scores = _sorted_lengths(lengths, scores)
    return int(relative_break_lengths(lengths, scores[None, :], fraction)[0]) or None


def chance_corrected_recall(recall, k: int, n_candidates):
    """Recall@k corrected for chance, for one relevant candidate among ``n_candidates`` ranked:
    a random ranking puts it in the top k with probability k / n, so

        r_cc = (r - k/n) / (1 - k/n)

    is 0 at chance, 1 for a perfect ranker and negative below chance (the kappa form). NaN where
    k >= n (every ranking finds it: there is nothing to correct against). Elementwise over
    ``recall`` and ``n_candidates``; the mean of per-query values equals the corrected mean
    recall when n is the same for every query."""
    recall = np.asarray(recall, dtype=float)
    n_candidates = np.asarray(n_candidates, dtype=float)
    if k < 1:
        raise ValueError(f"k must be >= 1, not {k}")
    if np.any(n_candidates < 1):
        raise ValueError("n_candidates must be >= 1")
    return chance_corrected(recall, recall_chance(k, n_candidates))


def chance_corrected(value, chance):
    """``value`` corrected for a chance level, (v - c) / (1 - c): 0 at the chance level, 1 at 1,
    NaN where the chance level is 1 (nothing to correct against). Elementwise. The chance level is
    k/n for a random ranking (:func:`chance_corrected_recall`), or a measured needle-blind level
    (a several-needle haystack's own control, which holds the other needles)."""
    value, chance = np.asarray(value, dtype=float), np.asarray(chance, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(chance < 1, (value - chance) / (1 - chance), np.nan)


def recall_chance(k: int, n_candidates):
    """The recall@k of a random ranking of one relevant candidate among ``n_candidates``:
    min(k / n, 1), elementwise (10/17 = 0.59 at recall@10 for a pool of 17; 10/12 = 0.83 for 12)."""
    return np.minimum(k / np.asarray(n_candidates, dtype=float), 1.0)


def recommended_chunk_tokens(break_point_tokens: int | None, window: int | None = None) -> int | None:
    """floor(CHUNK_FACTOR * break point), CHUNK_FACTOR = 0.8: a chunk size with a safety margin
    below the break point; with ``window`` (the tokens a model reads of one text, when it reads
    one window), at most that: min(floor(0.8 * L*), window)."""
    if break_point_tokens is None:
        return None
    chunk = int(math.floor(CHUNK_FACTOR * break_point_tokens))
    return chunk if window is None else min(chunk, int(window))


def bootstrap_ci(
    values, stat: Callable = np.mean, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED, confidence: float = 0.95, paired: bool = False
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``stat`` (scipy.stats.bootstrap).

    ``values`` is one sample, or a tuple of samples for a multi-sample statistic such as
    ``auc_score(pos, neg)`` (resampled independently, or together when ``paired``).
    A statistic with an ``axis`` argument is evaluated vectorised.
    """
    from scipy import stats

    samples = tuple(_as_array(v, "values") for v in values) if isinstance(values, tuple) else (_as_array(values, "values"),)
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

    The mean of one sample and :func:`auc_score` of two are computed exactly from per-cluster
    sums (a resample is a vector of cluster counts w: mean = w·S / w·N, AUC = wᵀ K w /
    (w·n_pos)(w·n_neg) with K the per-cluster-pair sums of 1[p > n] + ½ 1[p = n]); any other
    statistic is recomputed on every resample: all at once, along ``axis``, when every cluster has
    the same number of rows, as in the paired design; else all at once from the rows weighted by
    their cluster's draws when the statistic takes frequency ``weights`` (a resample that draws
    cluster c k times holds each of its rows k times); else one resample at a time.
    """
    samples = tuple(_as_array(s, "values") for s in samples)
    clusters = tuple(np.asarray(c) for c in clusters)
    if len(samples) != len(clusters) or any(s.size != c.size for s, c in zip(samples, clusters)):
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
                values = np.asarray(stat(*(s[p] for s, p in zip(samples, parts)), axis=-1), dtype=float)
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
                        values[b] = stat(*(s[p] for s, p in zip(samples, parts)))
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))
