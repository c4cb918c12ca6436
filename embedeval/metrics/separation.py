"""How well sim(q, haystack) tells the haystacks holding q's needle from those without it: the
normalized similarity, the comparative ratio, and the separation of the two classes (mean
difference, ROC AUC, Cohen's d)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from embedeval.metrics.arrays import as_array, paired
from embedeval.metrics.moments import cohens_d


def normalized_similarity(sim_qh, sim_qn) -> np.ndarray:
    """sim(q, haystack) / sim(q, needle alone), element-wise.

    1.0: the haystack is as close to the question as the bare needle; lower values mean the
    filler dilutes the needle. Example (Jina study): 0.2391 / 0.3598 = 0.66454.
    """
    sim_qh, sim_qn = paired(sim_qh, sim_qn, "sim_qh", "sim_qn")
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
    pos, neg = paired(pos, neg, "sim_pos", "sim_neg")
    return (pos > neg) + 0.5 * (pos == neg)


class Separation(NamedTuple):
    """How well sim(q, haystack) separates haystacks with q's needle from those without."""

    mean_diff: float
    auc: float
    cohens_d: float
    n_pos: int
    n_neg: int


def separation(pos, neg) -> Separation:
    """Mean difference, ROC AUC (scikit-learn ``roc_auc_score``) and Cohen's d.

    Positives: sim(q, haystacks with q's needle); negatives: sim(q, same-length haystacks
    without an answer to q). AUC = P(pos > neg) + 0.5 P(pos == neg); 0.5 chance, 1.0 perfect.
    """
    pos = as_array(pos, "pos (no positive scores: AUC needs both classes)")
    neg = as_array(neg, "neg (no negative scores: AUC needs both classes)")
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
