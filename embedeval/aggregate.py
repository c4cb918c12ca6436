"""Similarity table -> metrics table: every metric of :mod:`embedeval.metrics` per condition.

Cells are :data:`~embedeval.schema.CELL` (embedder, strategy, query form, variant, length, distractor
count, needle count, own question), each also split by category and by depth bucket. Positives are the haystacks holding the question's
needle; negatives (for AUC, Cohen's d, the comparative ratio) are the controls of the same length,
distractor count and needle count (a K-needle haystack's control holds its K - 1 other needles, so
the separation measures its own needle alone; a category's or depth bucket's slice, the controls
of its own needle haystacks) — for the ratio, each haystack against its own control
(``control_id``). Output is long: one row per metric with its
value, n and a 95% CI from a cluster bootstrap over question groups (the needle haystacks of one
question share its question and its filler, so they are resampled together).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from embedeval.defaults import DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from embedeval.labels import ALL, CONTROL, RETRIEVAL_MEASURES
from embedeval.metrics.bootstrap import cluster_bootstrap_ci
from embedeval.metrics.moments import cohens_d, mean_difference, pearson_r, regression_intercept, regression_slope, spearman_rho
from embedeval.metrics.position import bucket_names, depth_bucket_index, position_effects
from embedeval.metrics.separation import auc_score, comparative_ratio, win_scores
from embedeval.schema import CELL, CONDITION, METRIC_COLUMNS, N_DISTRACTORS, N_NEEDLES, OWN_QUESTION, SCORER


def pair_with_controls(
    table: pd.DataFrame,
    score: str = "sim_qh",
    condition: Sequence[str] = CONDITION,
) -> pd.DataFrame:
    """The needle rows of ``table`` with their control's score in column ``neg``.

    A row's control is the ``variant == CONTROL`` row whose ``haystack_id`` is the row's
    ``control_id`` (for the same embedder, strategy and query form); a table without control
    ids (made by hand, or by a version before distractors) pairs each row with the control sharing
    the ``condition`` columns present in it. Needle rows without a control are dropped.
    """
    is_control = table["variant"] == CONTROL
    if "control_id" in table.columns and "haystack_id" in table.columns and table["control_id"].notna().any():
        keys = [c for c in SCORER if c in table.columns] + ["control_id"]
        controls = table.loc[is_control, keys[:-1] + ["haystack_id", score]].rename(columns={"haystack_id": "control_id"})
    else:
        keys = [c for c in condition if c in table.columns]
        controls = table.loc[is_control, keys + [score]]
    controls = controls.rename(columns={score: "neg"})
    if controls.duplicated(keys).any():
        raise ValueError(f"more than one control per condition {keys}")
    pairs = table.loc[~is_control].merge(controls, on=keys, how="inner", validate="many_to_one")
    if pairs.empty:
        raise ValueError("no needle haystack has a matching control")
    return pairs


def comparative_ratio_table(table: pd.DataFrame, by: Sequence[str] = ("length", "variant"), score: str = "sim_qh") -> pd.DataFrame:
    """Comparative ratio per group of ``by`` (see :func:`pair_with_controls`): ``by`` + ratio + n."""
    pairs = pair_with_controls(table, score)
    rows = [
        {**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)), "ratio": comparative_ratio(g[score], g["neg"]), "n": len(g)}
        for key, g in pairs.groupby(list(by), sort=True)
    ]
    return pd.DataFrame(rows)


class _Rows:
    """Collects metric rows for one labelled cell."""

    def __init__(self, labels: dict, n_resamples: int, seed: int):
        self.labels, self.n_resamples, self.seed, self.rows = labels, n_resamples, seed, []

    def add(self, metric: str, value: float, n: int, ci: tuple[float, float] = (np.nan, np.nan)) -> None:
        self.rows.append({**self.labels, "metric": metric, "value": float(value), "n": int(n), "ci_lo": ci[0], "ci_hi": ci[1]})

    def ci(self, stat, samples: tuple, groups: tuple) -> tuple[float, float]:
        """Cluster bootstrap over question groups (:func:`~embedeval.metrics.bootstrap.cluster_bootstrap_ci`)."""
        return cluster_bootstrap_ci(stat, samples, groups, self.n_resamples, self.seed)

    def mean(self, metric: str, values: np.ndarray, groups: np.ndarray) -> None:
        """Mean of the finite values (an undefined normalized similarity is NaN), if any."""
        values, groups = np.asarray(values, dtype=float), np.asarray(groups)
        defined = np.isfinite(values)
        if not defined.any():
            return
        values, groups = values[defined], groups[defined]
        self.add(metric, values.mean(), values.size, self.ci(np.mean, (values,), (groups,)))

    def two_sample(self, metric: str, stat, pos: np.ndarray, neg: np.ndarray, pos_groups: np.ndarray,
                   neg_groups: np.ndarray) -> None:
        if pos.size < 2 or neg.size < 2:
            return
        value = stat(pos, neg)
        ci = self.ci(stat, (pos, neg), (pos_groups, neg_groups)) if np.isfinite(value) else (np.nan, np.nan)
        self.add(metric, value, pos.size + neg.size, ci)


def _separation_rows(rows: _Rows, positives: pd.DataFrame, controls: pd.DataFrame, full: bool) -> None:
    pos, neg = positives["sim_qh"].to_numpy(float), controls["sim_qh"].to_numpy(float)
    groups, control_groups = positives["group_id"].to_numpy(), controls["group_id"].to_numpy()
    rows.mean("normalized_mean", positives["normalized"].to_numpy(float), groups)
    rows.mean("comparative_ratio", positives["win"].to_numpy(float), groups)
    rows.two_sample("auc", auc_score, pos, neg, groups, control_groups)
    if not full:
        return
    rows.two_sample("mean_diff", mean_difference, pos, neg, groups, control_groups)
    if pos.size + neg.size >= 3 and np.isfinite(cohens_d(pos, neg)):
        rows.two_sample("cohens_d", cohens_d, pos, neg, groups, control_groups)
    rows.mean("needle_visible_share", positives["needle_visible"].astype(float).to_numpy(), groups)
    rows.mean("truncated_share", positives["truncated"].astype(float).to_numpy(), groups)
    if "chunk_has_needle" in positives.columns:
        rows.mean("chunk_has_needle_share", positives["chunk_has_needle"].astype(float).to_numpy(), groups)
    depth, score = positives["depth"].to_numpy(float), positives["normalized"].to_numpy(float)
    defined = np.isfinite(score)
    depth, score, groups = depth[defined], score[defined], groups[defined]
    if np.unique(depth).size >= 3 and np.ptp(score) > 0:
        effects = position_effects(depth, score)
        for metric, value, stat in (("pearson_r", effects.pearson_r, pearson_r), ("spearman_rho", effects.spearman_rho, spearman_rho),
                                    ("slope", effects.slope, regression_slope), ("intercept", effects.intercept, regression_intercept)):
            rows.add(metric, value, depth.size, rows.ci(stat, (depth, score), (groups, groups)))


def cell_control_rows(controls: pd.DataFrame, cell: pd.DataFrame) -> pd.DataFrame:
    """The negatives of a cell's separation metrics: the controls of its own needle haystacks
    (their ``control_id``s; a K-needle haystack's holds its K - 1 other needles, a haystack's with
    distractors its distractors, in its own variant's wording), or, for a table without control
    ids, every control of the cell's length and distractor count."""
    if "control_id" in cell.columns and cell["control_id"].notna().all():
        return controls[controls["haystack_id"].isin(set(cell["control_id"]))]
    same = (controls["length"] == cell["length"].iloc[0]) & (controls[N_DISTRACTORS] == cell[N_DISTRACTORS].iloc[0])
    return controls[same]


def _depth_buckets(depth: pd.Series, n_buckets: int) -> np.ndarray:
    return np.asarray(bucket_names(n_buckets))[depth_bucket_index(depth.to_numpy(float), n_buckets)]


def retrieval_metrics(retrieval: pd.DataFrame, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED,
                      n_buckets: int = 3) -> pd.DataFrame:
    """Long metrics rows (columns :data:`~embedeval.schema.METRIC_COLUMNS`) from a rank table: the mean of every
    per-query measure (:data:`~embedeval.labels.RETRIEVAL_MEASURES`) per cell, per category
    and per depth bucket."""
    retrieval = retrieval.assign(depth_bucket=_depth_buckets(retrieval["depth"], n_buckets))
    out: list[dict] = []
    for key, cell in retrieval.groupby(CELL, sort=True):
        labels = dict(zip(CELL, key, strict=True))
        rows = _Rows(labels, n_resamples, seed)
        slices = [(ALL, ALL, cell)] + [(category, ALL, sub) for category, sub in cell.groupby("category", sort=True)]
        slices += [(ALL, bucket, sub) for bucket, sub in cell.groupby("depth_bucket", sort=False)]
        for category, bucket, sub in slices:
            rows.labels = {**labels, "category": category, "depth_bucket": bucket}
            for measure in RETRIEVAL_MEASURES:
                rows.mean(measure, sub[measure].to_numpy(float), sub["group_id"].to_numpy())
        out += rows.rows
    return pd.DataFrame(out, columns=METRIC_COLUMNS)


def nolima_metrics(similarities: pd.DataFrame, n_resamples: int = DEFAULT_N_BOOTSTRAP, seed: int = DEFAULT_SEED, n_buckets: int = 3,
                   retrieval: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long metrics table (columns :data:`~embedeval.schema.METRIC_COLUMNS`) from a similarity table and, if given,
    the rank table (:func:`retrieval_metrics`). The separation metrics need a control, so they
    come from the haystacks' own questions only; with several needles per haystack the other
    questions' rows are in the rank table's cells (``own_question`` false)."""
    pairs = pair_with_controls(similarities)
    pairs["win"] = win_scores(pairs["sim_qh"], pairs["neg"])
    pairs["depth_bucket"] = _depth_buckets(pairs["depth"], n_buckets)
    controls = similarities[similarities["variant"] == CONTROL]
    scorer_controls = {key: g for key, g in controls.groupby(SCORER)}
    out: list[dict] = []
    for key, cell in pairs.groupby(CELL, sort=True):
        cell_controls = cell_control_rows(scorer_controls[key[:3]], cell)
        labels = dict(zip(CELL, key, strict=True))
        rows = _Rows({**labels, "category": ALL, "depth_bucket": ALL}, n_resamples, seed)
        _separation_rows(rows, cell, cell_controls, full=True)
        for category, sub in cell.groupby("category", sort=True):
            rows.labels = {**labels, "category": category, "depth_bucket": ALL}
            _separation_rows(rows, sub, cell_controls[cell_controls["category"] == category], full=False)
        for bucket, sub in cell.groupby("depth_bucket", sort=False):  # a bucket's negatives: its own haystacks' controls
            rows.labels = {**labels, "category": ALL, "depth_bucket": bucket}
            _separation_rows(rows, sub, cell_control_rows(cell_controls, sub), full=False)
        out += rows.rows
    table = pd.DataFrame(out, columns=METRIC_COLUMNS)
    if retrieval is None:
        return table
    return pd.concat([table, retrieval_metrics(retrieval, n_resamples, seed, n_buckets)], ignore_index=True)


def metric_series(metrics: pd.DataFrame, metric: str, category: str = ALL, depth_bucket: str = ALL) -> pd.DataFrame:
    """Rows of one metric for the given category/bucket slice (default: the overall cells)."""
    mask = (metrics["metric"] == metric) & (metrics["category"] == category) & (metrics["depth_bucket"] == depth_bucket)
    return metrics[mask]


# --- the series a report's headline reads (its answers, the decision table) --------------------------------------------
def main_variant(metrics: pd.DataFrame) -> str:
    """The variant the single-variant sections show: one-hop if the run has it."""
    variants = list(metrics["variant"].unique())
    return "onehop" if "onehop" in variants else sorted(variants)[0]


def one_needle(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (metrics, similarities, a rank table or break points) of haystacks with
    one needle, asked their own question."""
    return frame[(frame[N_NEEDLES] <= 1) & frame[OWN_QUESTION].astype(bool)]


def fewest_distractors(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``metrics`` with the smallest distractor count of the run (all rows of a run
    without distractors)."""
    if N_DISTRACTORS not in metrics.columns:
        return metrics
    return metrics[metrics[N_DISTRACTORS] == metrics[N_DISTRACTORS].min()]
