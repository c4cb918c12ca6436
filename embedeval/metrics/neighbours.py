"""Nearest neighbours of vectors: maximal marginal relevance, the k highest cosines of each query
to a reference set, their mean, and where a value stands among reference values (percentile rank)."""

from __future__ import annotations

import numpy as np

from embedeval.metrics.arrays import as_array


def mmr(relevance, similarity, k: int, lam: float = 0.5) -> list[int]:
    """Maximal marginal relevance (Carbonell & Goldstein, 1998): ``k`` items picked one at a time,
    each the unpicked item i maximising

        lam * relevance[i] - (1 - lam) * max_{j picked} similarity[i, j]

    (the second term is 0 for the first pick), so each pick is relevant and unlike those before it.
    ``relevance``: (n,) scores (e.g. cosine to a cluster's centroid); ``similarity``: (n, n) pairwise
    scores. ``lam = 1`` is plain relevance order; ties go to the lower index. Returns indices in
    pick order (all n when k >= n)."""
    relevance = as_array(relevance, "relevance")
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
    ordered = np.sort(as_array(reference, "reference"))
    below = np.searchsorted(ordered, values - tolerance, side="left")
    at_or_below = np.searchsorted(ordered, values + tolerance, side="right")
    return 100 * (below + 0.5 * (at_or_below - below)) / ordered.size
