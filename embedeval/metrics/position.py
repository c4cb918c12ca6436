"""Position effects: how a score depends on the needle's depth (0 = start, 1 = end), and the
equal-width depth buckets (beginning, middle, end) the tables are split by."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from embedeval.metrics.arrays import paired
from embedeval.metrics.moments import pearson_r, regression_intercept, regression_slope, spearman_rho

BUCKET_NAMES_3 = ("beginning", "middle", "end")


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
    depth, score = paired(depth, score, "depth", "score")
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
