"""A series' means per length, over question groups, and on every cluster-bootstrap resample of the
groups: what the break points (:mod:`embedeval.breaks`) and the decision table
(:mod:`embedeval.decision`) read a series' curve and its uncertainty from.

A series' rows are first summed per question group g and length l (:func:`group_table`): S[g, l]
the sum and N[g, l] the count of its finite values. Its mean at a length is then
m_l = sum_g S[g, l] / sum_g N[g, l] (:func:`group_means`), and on a resample b that draws group g
w_b[g] times (:func:`~embedeval.metrics.bootstrap.cluster_resamples`), m_b = w_b . S / w_b . N
(:func:`resampled_means`): one draw of groups serves every length.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from embedeval.metrics.bootstrap import cluster_resamples


def group_table(rows: pd.DataFrame, values: np.ndarray, groups: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per question group (``group_id``) and length (``length``) of a series' rows, the sum and
    the count of the finite ``values``: (sorted lengths, sums (G, L), counts (G, L)). Every length
    of the rows has a column, so a length where no value is defined (recall@k that cannot be
    corrected for chance) is there with a count of 0. ``groups``: the sorted group ids the rows
    are coded against (several series resampled together), by default the rows' own."""
    lengths, length_codes = np.unique(rows["length"].to_numpy(np.int64), return_inverse=True)
    names = rows["group_id"].astype(str).to_numpy()
    if groups is None:
        groups, group_codes = np.unique(names, return_inverse=True)
    else:
        group_codes = np.searchsorted(groups, names)
    shape = (len(groups), lengths.size)
    defined = np.isfinite(values)
    sums, counts = np.zeros(shape), np.zeros(shape)
    np.add.at(sums, (group_codes[defined], length_codes[defined]), values[defined])
    np.add.at(counts, (group_codes[defined], length_codes[defined]), 1.0)
    return lengths, sums, counts


def group_means(sums: np.ndarray, counts: np.ndarray, axis: int = 0) -> np.ndarray:
    """The means of a group table (:func:`group_table`) over ``axis`` (the groups by default):
    sum S / sum N, NaN where no value is defined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return sums.sum(axis) / counts.sum(axis)


def resampled_means(sums: np.ndarray, counts: np.ndarray, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every cluster-bootstrap resample's per-length means m_b = w_b . S / w_b . N of a group table
    (:func:`group_table`; one draw of groups serves every length) and the values behind them
    (w_b . N): (n_resamples, L) each, the mean NaN where a resample drew no value at a length."""
    _, weights = cluster_resamples(sums.shape[0], n_resamples, seed)
    drawn = weights @ counts
    with np.errstate(divide="ignore", invalid="ignore"):
        return (weights @ sums) / drawn, drawn
